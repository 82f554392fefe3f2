"""NPUMoE: static capacity plans, expert execution strategies, calibration, routing traces."""
