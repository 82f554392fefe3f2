"""Ahead-of-time compilation for accelerators this machine does not have: targets (chips.py), the
train and decode steps lowered and compiled (aot.py), fit and the cheapest fix (fit.py), the
roofline estimate and table (report.py), the ``edge-jax compile`` command (command.py)."""
