"""An HF model family: how its ``config.json`` maps to ``model.*`` keys and back, and how each of its
tensors maps to one of our params and back. A new family is one module under
:mod:`edge_jax.interop.families` that registers a :class:`Family` in :data:`FAMILIES`.

The tensor map is one list of :class:`Tensor` entries, read in both directions: import takes the HF
tensors an entry names and calls ``to_ours``; export calls ``to_hf`` on our param. Every HF tensor
of a checkpoint must be named by exactly one entry (a tensor nobody names is an error, not silently
dropped). HF linear weights are ``[out, in]``; ours are ``[in..., out...]`` (:func:`linear`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from edge_jax.errors import UserError
from edge_jax.registry import Registry


class Unsupported(UserError, ValueError):
    """A checkpoint or model setting this converter cannot represent (one line naming it)."""


@dataclasses.dataclass(frozen=True)
class Tensor:
    """Our param ``ours`` (slash path under ``params``, e.g. ``layers_0/attn/q_proj/kernel``) made of the
    HF tensors ``hf`` (full names), each of shape ``hf_shape``; ``to_ours(list) -> array`` and
    ``to_hf(array) -> list`` are inverse, exact in any dtype (reshapes, transposes, stacks only).

    One HF tensor split into several of our params (MLA's ``kv_a_proj_with_mqa``): one entry per param
    names it, each ``to_ours`` taking its part; the first has the others' paths in ``joins`` (its
    ``to_hf(array, *joined arrays)`` writes the whole tensor), the others ``exported=False``."""
    ours: str
    hf: tuple[str, ...]
    hf_shape: tuple[int, ...]
    to_ours: Callable[[list], np.ndarray]
    to_hf: Callable[..., list]
    joins: tuple[str, ...] = ()
    exported: bool = True


def copy(ours: str, hf: str, shape: Sequence[int]) -> Tensor:
    """A tensor both sides hold in the same layout (norm scales, biases, embeddings)."""
    shape = tuple(int(s) for s in shape)
    return Tensor(ours, (hf,), shape, lambda xs: xs[0], lambda a: [a])


def linear(ours: str, hf: str, out_shape: Sequence[int], in_shape: Sequence[int]) -> Tensor:
    """HF ``[prod(out), prod(in)]`` <-> ours ``[*in_shape, *out_shape]``."""
    out_shape, in_shape = tuple(out_shape), tuple(in_shape)
    n_out, n_in = int(np.prod(out_shape)), int(np.prod(in_shape))
    return Tensor(ours, (hf,), (n_out, n_in),
                  lambda xs: xs[0].T.reshape(*in_shape, *out_shape),
                  lambda a: [a.reshape(n_in, n_out).T])


def stacked_linear(ours: str, hf: Sequence[str], out: int, inp: int) -> Tensor:
    """``E`` HF linears ``[out, in]`` (one per expert) <-> ours ``[E, in, out]``."""
    hf = tuple(hf)
    return Tensor(ours, hf, (out, inp), lambda xs: np.stack([x.T for x in xs]), lambda a: [x.T for x in a])


def permuted(t: Tensor, perm: np.ndarray, axis: int) -> Tensor:
    """``t`` with our param's ``axis`` reordered by ``perm`` (ours[..., j] = hf-order[..., perm[j]])."""
    inverse = np.argsort(perm)
    return dataclasses.replace(t, to_ours=lambda xs: np.take(t.to_ours(xs), perm, axis=axis),
                               to_hf=lambda a: t.to_hf(np.take(a, inverse, axis=axis)))


@dataclasses.dataclass(frozen=True)
class Family:
    """``model_types``: the HF ``config.json`` ``model_type`` values it reads; ``architecture``: the
    transformers class written to ``config.json`` on export (and built for ``--check``).
    ``model_keys(hf_config: dict) -> dict`` gives the ``model.*`` values (raising :class:`Unsupported`
    for a setting we do not implement); ``hf_config(cfg: ModelConfig) -> dict`` is its inverse (raising
    :class:`Unsupported` for a model HF has no form of); ``tensors(cfg) -> list[Tensor]`` the tensor map."""
    model_types: tuple[str, ...]
    architecture: str
    model_keys: Callable[[dict], dict]
    hf_config: Callable[[object], dict]
    tensors: Callable[[object], list[Tensor]]


FAMILIES: Registry[Family] = Registry("HF model family")
