"""Parameter counts from abstract shapes (``jax.eval_shape``: nothing is allocated).

``edge-jax params`` prints :func:`report_params`: our counts, then the lines of every comparison
registered in :data:`PARAM_COMPARISONS` (a paper registers one beside the counts it reports, in
its own package)."""
from __future__ import annotations

import functools
from functools import partial
from typing import Callable, Mapping

import flax.linen as nn
import jax
import numpy as np

from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.inference import inference_config
from edge_jax.models.inputs import example_inputs
from edge_jax.registry import Registry


def abstract_params(model: nn.Module, seq_len: int = 8):
    """Boxed (logically partitioned) parameter shapes, built without allocating memory."""
    return jax.eval_shape(partial(model.init, **example_inputs(model.cfg, 1, seq_len)), jax.random.key(0))


# Parameters stored in ROM (flash) at inference: token- or n-gram-indexed memory tables.
ROM_AXES = {("vocab", "mem"), ("ngram", "mem")}


@functools.lru_cache(maxsize=64)
def param_sizes(model_cfg: ModelConfig) -> tuple[tuple[str, int, tuple], ...]:
    """(path, size, logical axis names) of every parameter of the model. Traced once per config in a
    process: a paper-size model takes seconds to trace, and a report counts the training and inference
    forms (the same config for most memory kinds) and then prints comparisons that count again."""
    boxed = abstract_params(DecoderLM(model_cfg))["params"]
    flat = jax.tree_util.tree_flatten_with_path(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))[0]
    return tuple((jax.tree_util.keystr(path), int(np.prod(nn.unbox(leaf).shape)), tuple(getattr(leaf, "names", ())))
                 for path, leaf in flat)


def param_breakdown(model_cfg: ModelConfig) -> dict:
    """Training-form counts, plus what inference keeps in RAM and what goes to ROM.

    ``ram`` and ``rom`` are counted on the inference form: a MeKi model after folding (its
    training-only projection G disappears into the table). ``rom`` is every memory table.
    """
    train = param_sizes(model_cfg)
    total = sum(n for _, n, _ in train)
    embed = sum(n for path, n, _ in train if path.startswith("['embed']"))
    head = sum(n for path, n, _ in train if path.startswith("['lm_head']"))
    out = {"total": total, "embedding": embed, "lm_head": head, "non_embedding": total - embed - head}
    infer = param_sizes(inference_config(model_cfg))
    rom = sum(n for _, n, names in infer if names in ROM_AXES)
    out.update(ram=sum(n for _, n, _ in infer) - rom, rom=rom)
    return out


def _non_embedding(model_cfg: ModelConfig) -> int:
    """``param_breakdown(model_cfg)["non_embedding"]`` from the training form alone (ablation files call
    :func:`matched_d_ff` with the same reference model for every twin: :func:`param_sizes` traces it once)."""
    return sum(n for path, n, _ in param_sizes(model_cfg) if not path.startswith(("['embed']", "['lm_head']")))


def matched_d_ff(model: Mapping, changes: Mapping, multiple: int = 8) -> int:
    """The ``d_ff`` that gives ``model`` with ``changes`` (another attention or FFN kind) the same
    non-embedding parameter count as ``model``, rounded to a multiple of ``multiple``."""
    def count(values):
        return _non_embedding(ModelConfig.from_config({**dict(values), "vocab_size": 256}))
    twin = count({**dict(model), **dict(changes), "d_ff": multiple})
    per_unit = (count({**dict(model), **dict(changes), "d_ff": 2 * multiple}) - twin) / multiple
    missing = count(model) - twin
    return max(multiple, multiple * round((missing / per_unit + multiple) / multiple))


# ``(config, counts) -> lines`` printed after the counts by ``edge-jax params``: ``counts`` is
# :func:`param_breakdown` of ``config.model``; a comparison that does not apply returns [].
PARAM_COMPARISONS: Registry[Callable[[object, dict], list[str]]] = Registry("parameter comparison")


def versus(label: str, ours: int, paper: float) -> str:
    """One comparison line: the paper's count and our ratio to it, within 3% or OUTSIDE."""
    ratio = ours / paper
    return (f"{label:>14}: {paper / 1e9:.2f}B  ours/paper = {ratio:.4f} "
            f"({'within' if abs(ratio - 1) <= 0.03 else 'OUTSIDE'} 3%)")


def report_params(config) -> str:
    """Our counts, then every registered comparison's lines (:data:`PARAM_COMPARISONS`);
    ``config.model.vocab_size`` must already be resolved."""
    if config.model.vocab_size <= 0:
        raise ValueError("model.vocab_size is unresolved; pass the config through train.setup.resolve_config")
    counts = param_breakdown(ModelConfig.from_config(config.model))
    names = {"total": "total (train)", "ram": "RAM params", "rom": "ROM weights"}
    lines = [f"{names.get(k, k):>14}: {v / 1e9:.4f}B ({v:,})" for k, v in counts.items()]
    for _, compare in PARAM_COMPARISONS.items():
        lines.extend(compare(config, counts))
    return "\n".join(lines)
