"""Numbers in the prose that cannot drift: blocks of README.md and docs/*.md written from the records.

A generated block sits between two markers, inline or over several lines::

    MeKi lowers validation loss by
    <!-- edge-jax docs: diff meki_main dense meki val_loss -->0.54<!-- /edge-jax docs --> nats

    <!-- edge-jax docs: summary -->
    | grid | cells | ...
    <!-- /edge-jax docs: summary -->

``edge-jax docs`` rewrites every block from ``results/`` (the grids' records and the committed benchmark
JSON); ``edge-jax docs --check`` exits 1 naming each block that differs, and a test runs it on the
committed docs. The text between the markers is never edited by hand. :mod:`edge_jax.docgen.blocks`
finds and fills the blocks, :mod:`edge_jax.docgen.sources` holds what they read and the generic block
kinds; a paper adds its own kinds to :data:`edge_jax.registry.DOC_BLOCKS` from its ``docs.py``.
"""
