"""Mixture-of-experts layer: router and experts, execution strategies, capacity plans."""
