"""Save a params tree whose leaves are made only when orbax writes them, one at a time.

:class:`Lazy` stands for an array (shape and dtype known, values from ``load()``); the handler
registered for it loads each leaf, writes it and lets it go before the next, so saving a tree
larger than memory needs memory for its largest leaves only. The files are orbax's own (a
``PyTreeCheckpointHandler`` item ``state``), in the layout :class:`edge_jax.train.checkpoint.Checkpointer`
reads, with the same checksums.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src.serialization import ocdbt_utils, type_handlers
from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

from edge_jax.train import checksums


@dataclasses.dataclass(eq=False)
class Lazy:
    """An array of ``shape`` and ``dtype`` whose values ``load()`` makes when it is written."""
    shape: tuple
    dtype: np.dtype
    load: Callable[[], np.ndarray]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _LazyHandler(type_handlers.NumpyHandler):
    """orbax's numpy handler, writing one leaf at a time (it writes every leaf of a batch at once)."""

    def __init__(self):
        super().__init__(deepcopy_host_arrays=False)

    async def _background_serialize(self, values, infos, args=None):
        from orbax.checkpoint._src.multihost import multihost

        for value, info, arg in zip(values, infos, args):
            await info.await_path_creation()
            spec = ts_utils.build_array_write_spec(
                info=info, arg=arg, global_shape=value.shape, local_shape=value.shape, dtype=value.dtype,
                use_ocdbt=info.is_ocdbt_checkpoint, metadata_key=self._metadata_key,
                process_index=ocdbt_utils.get_process_index_for_subdir(
                    use_ocdbt=info.is_ocdbt_checkpoint, override_ocdbt_process_id=self._override_ocdbt_process_id))
            if multihost.process_index() == 0:
                array = np.asarray(value.load(), dtype=value.dtype)
                if array.shape != tuple(value.shape):
                    raise ValueError(f"{info.name}: loaded shape {array.shape}, declared {value.shape}")
                await self._open_and_write(array, spec.json, info.ts_context)
                del array


def _registry():
    """orbax's default type handlers and ours for :class:`Lazy` (a registry of this save's own, so orbax's
    global one is untouched; a Lazy leaf is written like a numpy array and restores as one)."""
    from orbax.checkpoint._src.serialization import type_handler_registry as registry

    return registry.create_type_handler_registry(*registry._DEFAULT_TYPE_HANDLERS, (Lazy, _LazyHandler()))


def save_params(directory: str, step: int, params: dict) -> None:
    """Write ``{"params": params}`` (leaves :class:`Lazy` or arrays) as step ``step`` of the checkpoint
    directory ``directory``, checksummed, synchronously."""
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False,
                                           temporary_path_class=checksums.commit_class(directory))
    handler = ocp.PyTreeCheckpointHandler(type_handler_registry=_registry())
    with ocp.CheckpointManager(directory, options=options, item_handlers={"state": handler}) as mgr:
        mgr.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave({"params": params})))
        mgr.wait_until_finished()
