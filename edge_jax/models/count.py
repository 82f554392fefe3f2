"""Parameter counts from abstract shapes (``jax.eval_shape``: nothing is allocated)."""
from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import ml_collections

from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.inputs import example_inputs
from edge_jax.models.presets import MODEL_SIZES, PAPER_PARAMS


def abstract_params(model: nn.Module, seq_len: int = 8):
    """Boxed (logically partitioned) parameter shapes, built without allocating memory."""
    return jax.eval_shape(partial(model.init, **example_inputs(model.cfg, 1, seq_len)), jax.random.key(0))


def param_breakdown(model_cfg: ModelConfig) -> dict:
    params = nn.unbox(abstract_params(DecoderLM(model_cfg))["params"])
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    total = sum(leaf.size for _, leaf in flat)
    embed = sum(leaf.size for path, leaf in flat if jax.tree_util.keystr(path).startswith("['embed']"))
    head = sum(leaf.size for path, leaf in flat if jax.tree_util.keystr(path).startswith("['lm_head']"))
    return {"total": total, "embedding": embed, "lm_head": head, "non_embedding": total - embed - head}


def paper_size_of(model: ml_collections.ConfigDict) -> str | None:
    for name in PAPER_PARAMS:
        if all(model[k] == v for k, v in MODEL_SIZES[name].items()):
            return name
    return None


def report_params(config) -> str:
    """Counts beside the paper's RAM params; ``config.model.vocab_size`` must already be resolved."""
    if config.model.vocab_size <= 0:
        raise ValueError("model.vocab_size is unresolved; pass the config through train.setup.resolve_config")
    counts = param_breakdown(ModelConfig.from_config(config.model))
    lines = [f"{k:>14}: {v / 1e9:.4f}B ({v:,})" for k, v in counts.items()]
    paper = paper_size_of(config.model)
    if paper:
        ratio = counts["total"] / PAPER_PARAMS[paper]
        lines.append(f"{'paper (RAM)':>14}: {PAPER_PARAMS[paper] / 1e9:.2f}B  ours/paper = {ratio:.4f} "
                     f"({'within' if abs(ratio - 1) <= 0.03 else 'OUTSIDE'} 3%)")
    return "\n".join(lines)
