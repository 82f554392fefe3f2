"""PLE baseline (placeholder: being written)."""
import flax.linen as nn


class PLEInputs(nn.Module):
    vocab_size: int
    n_layers: int
    d_ple: int
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __call__(self, tokens_BT, embedded_BTD):
        raise NotImplementedError


class PLEBlock(nn.Module):
    d_ple: int
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __call__(self, h_BTD, ple_BTP):
        raise NotImplementedError
