"""Flash-decoding's shared pieces, used by every variant of a split decode step (the MLA decode's XLA
path, its TPU kernel and its GPU kernel): the score of a masked slot and the merge of independent runs."""
from __future__ import annotations

import jax.numpy as jnp

MASKED = float(jnp.finfo(jnp.float32).min)  # score of a slot past the length (exp(MASKED - m) == 0)


def merge_runs(o_BUHC, m_BUH1, l_BUH1, dtype):
    """The merge of U independent runs per row (unnormalised outputs, running maxima and sums,
    float32): M = max_r m_r, o = sum_r e^(m_r - M) o_r / sum_r e^(m_r - M) l_r, in ``dtype``.
    An empty run has m = MASKED, l = 0, o = 0 and weight exp(MASKED - M) = 0."""
    w_BUH1 = jnp.exp(m_BUH1 - m_BUH1.max(axis=1, keepdims=True))
    o_BHC = (w_BUH1 * o_BUHC).sum(axis=1) / (w_BUH1 * l_BUH1).sum(axis=1)
    return o_BHC.astype(dtype)
