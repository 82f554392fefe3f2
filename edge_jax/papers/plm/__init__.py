"""PLM: grids, activation sparsity, KV-cache accounting, architecture stats, MLA decode benchmark."""
