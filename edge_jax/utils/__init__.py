"""Generic helpers: atomic writes, timing, run provenance (git, device, versions), workdir labels."""
