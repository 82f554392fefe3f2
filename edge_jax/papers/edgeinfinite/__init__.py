"""EdgeInfinite: Algorithm 1 inference, long-context evaluation, grids and reports, benchmark."""
