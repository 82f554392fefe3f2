"""Generic helpers: atomic writes, timing."""
