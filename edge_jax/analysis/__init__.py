"""Analyses of trained workdirs (``edge-jax analyze ...``).

``logit_lens``: per-layer KL of early-exit predictions against the final output (MeKi §5.5, Fig. 7).
"""
