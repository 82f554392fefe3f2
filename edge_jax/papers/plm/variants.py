"""PLM's architecture twins (Tables 3-4): the same model with GQA / MHA attention or another FFN."""
from __future__ import annotations

from edge_jax.models.count import matched_d_ff


def plm_variant(model, attention: str = "mla", ffn: str = "relu2", match_params: bool = True) -> dict:
    """Model overrides that turn a PLM model into a twin: ``attention`` gqa (n_heads / 2 KV heads) or
    mha (one per query head), same head_dim; ``ffn`` another kind. With ``match_params`` the twin's
    d_ff keeps PLM's non-embedding parameter count (:func:`edge_jax.models.count.matched_d_ff`)."""
    changes = {}
    if attention != "mla":
        kv_heads = model["n_heads"] if attention == "mha" else max(1, model["n_heads"] // 2)
        changes.update(attention="gqa", n_kv_heads=kv_heads, kv_lora_rank=0, d_rope=0, q_lora_rank=0)
    if ffn != model["ffn"]:
        changes["ffn"] = ffn
    if changes and match_params:
        changes["d_ff"] = matched_d_ff(model, changes)
    return changes
