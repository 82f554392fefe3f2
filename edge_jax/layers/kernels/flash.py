"""Plain causal attention through the backend's library kernel, kernel name ``flash``.

We do not write our own flash attention: the libraries ship tuned ones.

- TPU: splash attention (``jax.experimental.pallas.ops.tpu.splash_attention``), one MQA kernel per
  KV group (its Q = H / G query heads share the group's keys), vmapped over batch and groups, run
  per shard under ``shard_map`` on the active mesh, rows split (:func:`edge_jax.sharding.per_shard`) since a
  Pallas call cannot be partitioned by XLA. Forward and backward are splash's own kernels.
- GPU: ``jax.nn.dot_product_attention(..., implementation="cudnn")`` (cuDNN's fused attention)
  for bfloat16 / float16; float32 has no cuDNN kernel and stays on XLA.
- elsewhere (CPU, ``model.kernels=pallas``): splash in the Pallas interpreter, which checks this
  wrapper (head grouping, scaling, blocks) against :func:`causal_attention_reference`.

The mask is causal in sequence order, which is the position mask of every caller of the plain
path (positions increase along the sequence); the cache and segmented paths keep their own.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from edge_jax.layers.attention.dot import causal_mask, dot_product_attention
from edge_jax.layers.kernels import backend
from edge_jax.sharding import per_shard

BLOCKS = (512, 256, 128)  # splash block sizes tried, largest first (its kv blocks are multiples of 128)


def causal_attention_reference(q_BTHK, k_BTGK, v_BTGK):
    """The XLA path: :func:`dot_product_attention` under the causal mask."""
    B, T = q_BTHK.shape[:2]
    pos_BT = jnp.broadcast_to(jnp.arange(T), (B, T))
    return dot_product_attention(q_BTHK, k_BTGK, v_BTGK, causal_mask(pos_BT, pos_BT))


def block_size(T: int) -> int | None:
    """Splash's q and kv block for ``T`` tokens: the largest of :data:`BLOCKS` dividing T, or None
    (T not a multiple of 128: the XLA path runs)."""
    return next((b for b in BLOCKS if T % b == 0), None)


@functools.cache
def _splash(T: int, heads: int, block: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa
    mask = sa.MultiHeadMask([sa.CausalMask((T, T)) for _ in range(heads)])
    sizes = sa.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                          block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
    with jax.ensure_compile_time_eval():  # its block tables are constants, cached across traces
        return sa.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def splash_attention(q_BTHK, k_BTGK, v_BTGK, block: int, interpret: bool):
    """Causal GQA through splash's MQA kernel, one call per (row, KV group); queries pre-scaled by
    1/sqrt(K) (splash does not scale)."""
    B, T, H, K = q_BTHK.shape
    G = k_BTGK.shape[2]
    kernel = _splash(T, H // G, block, interpret)
    q_BGQTK = jnp.moveaxis(q_BTHK.reshape(B, T, G, H // G, K), 1, 3) / jnp.sqrt(jnp.float32(K)).astype(q_BTHK.dtype)
    k_BGTK, v_BGTK = jnp.moveaxis(k_BTGK, 1, 2), jnp.moveaxis(v_BTGK, 1, 2)
    o_BGQTK = jax.vmap(jax.vmap(kernel))(q_BGQTK, k_BGTK, v_BGTK)
    return jnp.moveaxis(o_BGQTK, 3, 1).reshape(B, T, H, -1)


def causal_attention(q_BTHK, k_BTGK, v_BTGK):
    """Causal GQA attention [B, T, H, K] (queries and keys after RoPE) through the backend's library
    kernel; the XLA path where it has none for these shapes or dtype (module docstring). The caller
    asks :func:`edge_jax.layers.kernels.backend.use_pallas` (``"flash"``) first."""
    T = q_BTHK.shape[1]
    if backend.platform() == "gpu":
        if q_BTHK.dtype not in (jnp.bfloat16, jnp.float16):
            return causal_attention_reference(q_BTHK, k_BTGK, v_BTGK)
        return jax.nn.dot_product_attention(q_BTHK, k_BTGK, v_BTGK, is_causal=True, implementation="cudnn")
    block = block_size(T)
    if block is None:
        return causal_attention_reference(q_BTHK, k_BTGK, v_BTGK)
    run = functools.partial(splash_attention, block=block, interpret=backend.interpret("flash"))
    rows = ("batch", None, None, None)  # heads whole on each device: groups stay together
    return per_shard(run, (rows, rows, rows), rows)(q_BTHK, k_BTGK, v_BTGK)
