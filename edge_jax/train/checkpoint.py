"""Thin orbax wrapper: the train state and the data-iterator state saved together, atomically.

orbax writes each step to a temporary directory and renames it when complete, so a run killed
mid-save leaves the previous checkpoints intact and the partial one is ignored on restart.
"""
from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    def __init__(self, directory: str, keep: int, every: int):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=max(every, 1),
                                               create=True, cleanup_tmp_directories=True)
        self._mgr = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data"))

    def latest_step(self) -> int | None:
        return self._mgr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mgr.all_steps())

    def save(self, step: int, state, data_state: dict, force: bool = False) -> bool:
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state))
        return self._mgr.save(step, args=args, force=force)

    def restore(self, step: int, abstract_state):
        """``abstract_state``: a tree of ``jax.ShapeDtypeStruct`` carrying the target shardings."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore())
        out = self._mgr.restore(step, args=args)
        return out["state"], out["data"]

    def restore_params(self, step: int, abstract_params):
        """Only the ``params`` of the saved train state (``abstract_params`` as in :meth:`restore`), so
        the optimizer the source trained with need not match this one."""
        item = {"params": abstract_params}
        args = ocp.args.PyTreeRestore(item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                                      partial_restore=True)
        # its own checkpointer: the manager serves each item with one handler, the full restore's and save's
        with ocp.PyTreeCheckpointer() as checkpointer:
            return checkpointer.restore(os.path.join(self.directory, str(step), "state"), args=args)["params"]

    def saved_groups(self, step: int) -> set[str]:
        """The optimizer-group labels the step's train state was saved with (read from its metadata)."""
        with ocp.PyTreeCheckpointer() as checkpointer:
            tree = checkpointer.metadata(os.path.join(self.directory, str(step), "state")).item_metadata
        names = set()
        for path, _ in jax.tree_util.tree_flatten_with_path(getattr(tree, "tree", tree))[0]:
            keys = [getattr(k, "key", None) for k in path]
            names.update(keys[i + 1] for i, k in enumerate(keys[:-1]) if k == "inner_states")
        return names

    def wait(self) -> None:
        self._mgr.wait_until_finished()

    def close(self) -> None:
        self._mgr.wait_until_finished()
        self._mgr.close()
