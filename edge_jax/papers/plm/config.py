"""PLM's ``train.sparsity_batches``: after training, Algorithm 1 (activation sparsity, §7.2) on this
many validation batches (0: off); the sweep goes to ``<workdir>/sparsity.json``."""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Section


@dataclasses.dataclass(frozen=True)
class SparsityKeys:
    sparsity_batches: int = 0


def _validate(c) -> None:
    t = c.train
    if not 0 <= t.sparsity_batches <= t.eval_batches:
        raise ConfigError(f"train.sparsity_batches={t.sparsity_batches} must lie in [0, train.eval_batches="
                          f"{t.eval_batches}]; it uses the first validation batches")


SECTIONS.register("plm_sparsity", Section("train", SparsityKeys, _validate, resumable=("train.sparsity_batches",)))
