"""The inputs a user's trial found handled badly (silently wrong, lost work, a traceback or a misleading line),
each with what it does now: refused in one line, or handled with one warning."""
import fcntl
import json
import os

from cases_data import CLAIMED, _data, _prepare
from cases_grid import _repo, grid
from cases_train import FALLBACK, _moved_aside, resume
from harness import Case, make_dir, state_files, train, write_file

HELD: list[int] = []   # lock files a row's setup holds while the row runs (released by its check)


def scribble(step: int, files: int = 3):
    """setup: 4,096 random bytes written at offset 200,000 (or the middle of a smaller file) into the step's
    ``files`` largest array files: bytes that still parse, so only the checksums can tell."""
    def setup(ctx):
        import numpy as np
        rng = np.random.default_rng(step)
        arrays = [p for p in state_files(ctx.base, step) if p.parent.name == "d"][:files]
        assert arrays
        for path in arrays:
            size = path.stat().st_size
            offset = 200_000 if size > 204_096 else max(size // 2 - 2048, 0)
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(rng.integers(0, 256, min(4096, size), dtype=np.uint8).tobytes())
    return setup


def _task(task: str, split: str, records: list):
    """setup: ``{tmp}/tasks/<task>/<split>.jsonl`` holding ``records``."""
    return write_file(f"tasks/{task}/{split}.jsonl", "".join(json.dumps(r) + "\n" for r in records))


def _piqa(**bad) -> list:
    good = [{"goal": f"open the jar {i}", "sol1": "twist the lid", "sol2": "hit it", "label": i % 2} for i in range(3)]
    return good[:2] + [{**good[2], **bad}]


ARC = [{"id": "q1", "question": "What melts ice?", "answerKey": "Z",
        "choices": {"text": ["heat", "cold", "dark"], "label": ["A", "B", "C"]}}]


def _zero_shot(task: str) -> list[str]:
    return ["eval", "--workdir", "{base}", "--tasks", task, "--data-dir", "{tmp}/tasks"]


def _compile(topology: str) -> list[str]:
    return ["compile", "--config", "configs/lm.py:size=tiny", "--config.model.vocab_size=512", "--topology", topology]


def _hold_unit(ctx):
    """setup: the toy grid's unit 0 held by 'another process' (another open file's flock, with its note)."""
    _repo()(ctx)
    path = ctx.tmp / "out" / "runs" / "cosine" / "seed0.lock"
    path.parent.mkdir(parents=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, json.dumps({"pid": 4242, "host": "node7", "since": "2026-11-26T01:02:03Z"}).encode(), 0)
    HELD.append(fd)


def _release(ctx, out):
    while HELD:
        os.close(HELD.pop())
    assert not (ctx.tmp / "out" / "records").exists(), out


SCRIBBLED = ("warning: checkpoint step 8 in ", "does not match its checksum", "using step 4")
TRAINED = {"base": "trained"}
CASES = [
    # the silent four
    Case("checkpoint_random_bytes_resume", resume(), (*FALLBACK, "does not match its checksum"), code=0,
         setup=scribble(8), changes=True, check=_moved_aside(8), **TRAINED),
    Case("checkpoint_random_bytes_eval", ["eval", "--workdir", "{base}", "--batches", "1"], SCRIBBLED, code=0,
         setup=scribble(8), **TRAINED),
    Case("task_label_out_of_range", _zero_shot("piqa"), ("validation.jsonl line 3: field 'label' is 5",
                                                         "2 choices (0 or 1)"),
         setup=_task("piqa", "validation", _piqa(label=5)), **TRAINED),
    Case("task_text_null", _zero_shot("piqa"), ("line 3: field 'goal' is null", "non-empty text"),
         setup=_task("piqa", "validation", _piqa(goal=None)), **TRAINED),
    Case("task_label_not_a_number", _zero_shot("piqa"), "line 3: field 'label' is \"x\"",
         setup=_task("piqa", "validation", _piqa(label="x")), **TRAINED),
    Case("task_answer_key_not_a_label", _zero_shot("arc_easy"), ("line 1: field 'answerKey' is \"Z\"",
                                                                  "one of the choice labels"),
         setup=_task("arc_easy", "test", ARC), **TRAINED),
    Case("task_label_found_before_training", train("--config.eval.zero_shot=piqa",
                                                   "--config.eval.data_dir={tmp}/tasks"),
         "validation.jsonl line 3: field 'label' is 5", setup=_task("piqa", "validation", _piqa(label=5)),
         changes=CLAIMED),
    Case("keep_no_checkpoint", train("--config.train.keep_ckpts=0"), "train.keep_ckpts=0 would keep no checkpoint"),
    Case("grid_unit_held_by_another_process", grid("--cell", "0"),
         ("cosine seed 0: being run by pid 4242 on host node7 since 2026-11-26T01:02:03Z", "skipped"), code=0,
         setup=_hold_unit, check=_release, changes=("out/table.*", "out/pairs.csv")),  # tables of no records
    # tracebacks that are one line now
    Case("workdir_is_a_file", train(workdir="{tmp}/f"), "--workdir", setup=write_file("f", "x")),
    Case("workdir_not_writable", train(workdir="/proc/1/run"), ("--workdir '/proc/1/run'", "is not writable")),
    Case("grid_out_is_a_file", grid("--out", "{tmp}/taken"), ("--out", "is a file"),
         setup=lambda ctx: (_repo()(ctx), write_file("taken", "x")(ctx))),
    Case("ckpt_every_zero", train("--config.train.ckpt_every=0"), "train.ckpt_every=0 must be >= 1"),
    Case("log_every_zero", train("--config.train.log_every=0"), "train.log_every=0 must be >= 1"),
    Case("eval_every_zero", train("--config.train.eval_every=0"), "train.eval_every=0 must be >= 1"),
    Case("parquet_empty_file", _data("name=parquet:{tmp}/p/*.parquet"), ("a.parquet is empty (0 bytes)",),
         setup=write_file("p/a.parquet", b""), changes=CLAIMED),
    Case("parquet_empty_file_prepare", _prepare("name=parquet:{tmp}/p/*.parquet", "tokens_dir={tmp}/tok"),
         "a.parquet is empty (0 bytes)", setup=write_file("p/a.parquet", b"")),
    Case("compile_one_chip_v5e", _compile("v5e-1"), "v5e-1", code=0, slow=True),
    Case("compile_one_chip_v6e", _compile("v6e-1"), "v6e-1", code=0, slow=True),
    # lines that misled
    Case("diverged_before_a_healthy_checkpoint", train("--config.train.lr=1e6", "--config.train.clip_norm=0",
                                                       "--config.train.warmup_steps=1"),
         ("non-finite loss/grad norm", "no checkpoint", "--config.train.lr=5e+05"), changes=True),
    Case("grid_set_key_typo", grid("--set", "train.stesp=30"), ("--set", "unknown config key 'train.stesp'",
                                                                "did you mean 'train.steps'"), setup=_repo()),
    Case("grid_unknown_preset", ["grid", "ablations/plm_activation.py", "--preset", "foo", "--out", "{tmp}/out"],
         ("unknown preset 'foo' of ablations/plm_activation.py", "presets: tiny")),
    Case("init_step_missing", train("--config.init_from={base}", "--config.init_step=5"),
         "has no checkpoint at init_step=5; its steps: 4, 8", changes=CLAIMED, **TRAINED),
    Case("init_step_without_init_from", train("--config.init_step=5"), "init_step=5 picks a checkpoint step"),
    Case("config_file_syntax_error", ["params", "--config", "{tmp}/bad.py"], "failed to load (SyntaxError",
         setup=write_file("bad.py", "def get_config(arg:\n")),
    Case("config_value_wrong_kind", train("--config.train.steps=[1]"), "'train.steps' needs a number, got '[1]'"),
    Case("prepare_leaves_no_partial_shard", _prepare("name=jsonl:{tmp}/d/*.jsonl", "tokens_dir={tmp}/tok"),
         "a.jsonl byte 16 is not JSON", setup=write_file("d/a.jsonl", '{"text": "a b"}\n{broken\n'),
         changes=("tok/*/[0-9]*.bin",)),  # the pieces before the bad record are finished shards; no .tmp stays
    Case("task_dir_empty_split", _zero_shot("piqa"), "piqa: no 'validation' split at", setup=make_dir("tasks"),
         **TRAINED),
]
