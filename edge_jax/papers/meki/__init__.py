"""MeKi: grids, fold-time analyses (logit lens, memory-size fit), decode benchmark."""
