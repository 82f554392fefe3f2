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


def _renamed(old: int, new: int):
    """setup: `mv checkpoints/<old> checkpoints/<new>` in {base}, its logged losses kept aside in {tmp}/losses.json."""
    def setup(ctx):
        (ctx.tmp / "losses.json").write_text(json.dumps(_losses(ctx.base)))
        (ctx.base / "checkpoints" / str(old)).rename(ctx.base / "checkpoints" / str(new))
    return setup


def _losses(workdir) -> dict:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {str(r["step"]): r["loss"] for r in rows if r.get("kind") == "train"}


def _retrained_from(step: int, moved: int):
    """check: the renamed step was moved aside, and the steps after ``step`` were trained again from it with
    the very losses the run logged before (none overwritten by a state resumed under the wrong step)."""
    def check(ctx, out):
        assert (ctx.base / "checkpoints.corrupt" / str(moved)).is_dir(), out
        assert not (ctx.base / "checkpoints" / str(moved)).exists(), out
        assert _losses(ctx.base) == json.loads((ctx.tmp / "losses.json").read_text()), out
    return check


def _checksums(step: int, content):
    """setup: the step's checksums.json in {base} holds ``content`` (a structure it never has)."""
    def setup(ctx):
        (ctx.base / "checkpoints" / str(step) / "checksums.json").write_text(json.dumps(content))
    return setup


def _cut(rel: str, keep: int = 100):
    """setup: {base}/``rel`` cut to its first ``keep`` bytes."""
    def setup(ctx):
        path = ctx.base / rel
        path.write_bytes(path.read_bytes()[:keep])
    return setup


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
    Case("resume_renamed_step_dir", resume(), ("warning: checkpoint step 6 in ", "is step 8's", "using step 4",
                                                "checkpoints.corrupt"),
         code=0, base="trained", setup=_renamed(8, 6), changes=True, check=_retrained_from(4, 6)),
    Case("resume_checksums_json_a_list", resume(), (*FALLBACK, "checksums.json is malformed"), code=0,
         base="trained", setup=_checksums(8, {"algorithm": "xxh3_128", "files": ["state/a", "state/b"]}),
         changes=True, check=_moved_aside(8)),
    Case("resume_checksums_json_bad_entries", resume(), (*FALLBACK, "checksums.json is malformed"), code=0,
         base="trained", setup=_checksums(8, {"algorithm": "xxh3_128", "files": {"state/a": {"size": 3}}}),
         changes=True, check=_moved_aside(8)),
    # the workdir's own config.json damaged: train and eval refuse in one line, nothing changed
    Case("resume_config_json_truncated", resume(), ("config.json is damaged (JSONDecodeError", "restore it from a "
                                                   "copy of the workdir"), base="trained", setup=_cut("config.json")),
    Case("eval_config_json_truncated", ["eval", "--workdir", "{base}", "--batches", "1"],
         ("config.json is damaged", "start over with a new --workdir"), base="trained", setup=_cut("config.json")),
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
