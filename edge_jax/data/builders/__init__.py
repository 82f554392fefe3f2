"""The built-in TFDS builders. Importing this package registers them with TFDS as
`edge_pystdlib`, `edge_facts` and `edge_longctx` (prefixed so they never clash with the TFDS
catalogue). They write array_record files and are read back without TensorFlow."""
from edge_jax.data.builders.facts import EdgeFacts, FactsConfig
from edge_jax.data.builders.longctx_builder import EdgeLongctx, LongctxConfig
from edge_jax.data.builders.pystdlib import EdgePystdlib, PystdlibConfig

BUILDERS = {"pystdlib": EdgePystdlib, "facts": EdgeFacts, "longctx": EdgeLongctx}

__all__ = ["BUILDERS", "EdgeFacts", "EdgeLongctx", "EdgePystdlib", "FactsConfig",
           "LongctxConfig", "PystdlibConfig"]
