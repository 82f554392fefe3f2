"""Each paper's application code, one folder per paper.

:data:`PAPERS` lists them; the bootstrap (:mod:`edge_jax.plugins`) imports each one's ``cli.py`` (its
commands and benchmarks, without JAX) and ``plugin.py`` (every registration of the paper: config sections,
evaluators, hooks, variants). A new paper is a folder here with those two modules, plus its name below.
Importing this package imports no paper.
"""

PAPERS = ("edgeinfinite", "expert_cache", "meki", "npumoe", "plm")  # registration order
