"""Engram baseline (placeholder: being written)."""
import flax.linen as nn


class Engram(nn.Module):
    vocab_size: int
    orders: tuple
    heads: int
    table_size: int
    d_head: int
    kernel: int = 4
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __call__(self, h_BTD, ngram_ids_BTN):
        raise NotImplementedError
