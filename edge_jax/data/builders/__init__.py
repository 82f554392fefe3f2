"""The built-in TFDS builders. Importing this package registers them with TFDS as
`edge_pystdlib`, `edge_facts`, `edge_longctx` and `edge_copies` (prefixed so they never clash with
the TFDS catalogue). They write array_record files and are read back without TensorFlow."""
from edge_jax.data.builders.copies import CopiesConfig, EdgeCopies
from edge_jax.data.builders.facts import EdgeFacts, FactsConfig
from edge_jax.data.builders.longctx_tfds import EdgeLongctx, LongctxConfig
from edge_jax.data.builders.pystdlib import EdgePystdlib, PystdlibConfig

# dataset name -> builder (drills is a form of edge_longctx)
BUILDERS = {"pystdlib": EdgePystdlib, "facts": EdgeFacts, "longctx": EdgeLongctx, "drills": EdgeLongctx,
            "copies": EdgeCopies}

__all__ = ["BUILDERS", "CopiesConfig", "EdgeCopies", "EdgeFacts", "EdgeLongctx", "EdgePystdlib", "FactsConfig",
           "LongctxConfig", "PystdlibConfig"]
