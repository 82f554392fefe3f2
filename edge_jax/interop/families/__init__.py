"""The HF model families edge_jax converts, one module each (importing this package registers them)."""
from edge_jax.interop.families import deepseek_v2, llama, phimoe, qwen2, qwen3, qwen3_moe  # noqa: F401
from edge_jax.interop.family import FAMILIES, Family, Unsupported


def family_of(model_type: str) -> tuple[str, Family]:
    """``(name, family)`` reading ``model_type``; :class:`Unsupported` listing the supported ones."""
    for name, fam in FAMILIES.items():
        if model_type in fam.model_types:
            return name, fam
    known = sorted(t for _, f in FAMILIES.items() for t in f.model_types)
    raise Unsupported(f"unsupported model_type {model_type!r}; edge_jax converts {', '.join(known)}")
