"""`edge-jax train` on an existing workdir or another run: resuming with another config or tokenizer,
damaged checkpoints (fallback with one warning, or one line when none is left), init_from and
train.trainable that cannot work.

Rows with ``base="trained"`` start from a copy of the session's tiny run (8 steps, checkpoints at
steps 4 and 8) in {base}; `resume` trains there again, init_from starts {workdir} from it."""
import json

from cases_data import CLAIMED
from harness import Case, both, delete_part, make_dir, train, truncate


def _other_tokenizer(where: str = "base"):
    """setup: the workdir's record of its tokenizer names another one."""
    def setup(ctx):
        path = getattr(ctx, where) / "tokenizer.json"
        path.write_text(json.dumps({"name": "spm-0123456789ab", "vocab_size": 300}))
    return setup


def resume(*extra: str) -> list[str]:
    """`edge-jax train` of the tiny run again in {base}."""
    return train(*extra, workdir="{base}")


def _moved_aside(step: int):
    """check: the damaged step was moved to checkpoints.corrupt/<step> and the run saved that step again."""
    def check(ctx, out):
        assert (ctx.base / "checkpoints.corrupt" / str(step)).is_dir(), out
        assert (ctx.base / "checkpoints" / str(step)).is_dir(), out
    return check


def _nothing_moved(ctx, out):
    assert not (ctx.base / "checkpoints.corrupt").exists(), out


FALLBACK = ("warning: checkpoint step 8 in ", "using step 4", "checkpoints.corrupt")
CASES = [
    # resuming a workdir
    Case("resume_with_another_model", resume("--config.model.d_ff=256"), "holds a run with different model.d_ff",
         base="trained"),
    Case("resume_with_another_schedule", resume("--config.train.schedule=wsd"), "holds a run with different train.sch",
         base="trained"),
    Case("resume_with_another_tokenizer", resume(), "was trained with tokenizer spm-0123456789ab",
         base="trained", setup=_other_tokenizer()),
    # damaged checkpoints: fall back to the newest intact step with one warning, or refuse in one line
    Case("resume_truncated_latest_step", resume(), FALLBACK, code=0, base="trained", setup=truncate(8),
         changes=True, check=_moved_aside(8)),
    Case("resume_deleted_part_of_latest_step", resume(), FALLBACK, code=0, base="trained", setup=delete_part(8),
         changes=True, check=_moved_aside(8)),
    Case("resume_every_step_damaged", resume(), ("no ", "checkpoint in ", "delete that directory"),
         base="trained", setup=both(truncate(8), truncate(4)), check=_nothing_moved),
    Case("resume_every_step_missing_parts", resume(), "delete that directory",
         base="trained", setup=both(delete_part(8), delete_part(4)), check=_nothing_moved),
    # starting from another run
    Case("init_from_dir_without_checkpoints", train("--config.init_from={tmp}/empty"),
         ("init_from=", "empty' has no checkpoints"), setup=make_dir("empty"), changes=CLAIMED),
    Case("init_from_dir_missing", train("--config.init_from={tmp}/nope"), ("init_from=", "nope' has no checkpoints"),
         changes=CLAIMED),
    Case("init_from_other_shapes", train("--config.init_from={base}", "--config.model.d_ff=256"),
         ("init_from=", "has shape"), base="trained", changes=CLAIMED),
    Case("init_from_other_tokenizer", train("--config.init_from={base}"), "was trained with tokenizer",
         base="trained", setup=_other_tokenizer(), changes=CLAIMED),
    # nothing to train
    Case("trainable_matches_nothing", train("--config.train.trainable=no_such_param"),
         "train.trainable='no_such_param' matches no param", changes=CLAIMED),
]
