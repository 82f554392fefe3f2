from edge_jax.models.decoder import DecoderLM, ModelConfig

__all__ = ["DecoderLM", "ModelConfig"]
