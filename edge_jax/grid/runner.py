"""Run an ablation grid cell by cell and keep one JSON record per cell x seed.

Layout under the output directory OUT:

    OUT/runs/<cell>/seed<s>/           workdir: checkpoints, metrics.jsonl (gitignored)
    OUT/runs/<cell>/seed<s>.lock       held while the unit runs (edge_jax.grid.locks)
    OUT/records/<cell>__seed<s>.json   the result record, written atomically at the end

A record exists only for a finished cell x seed, so a rerun after a crash or kill
skips the finished ones and resumes the others from their workdirs; an unreadable record (a truncated
file) is moved to OUT/records.corrupt/ with a warning and its unit runs again
(:func:`edge_jax.grid.records.has_record`). A unit is run under its lock,
taken before its workdir is claimed and held until its record is written: a second process that
reaches it (a retried job-array task) logs the holder and goes on with its other units, and the lock
of a killed process is free again (the kernel drops it) for the next one to resume. A cell whose full
config (seed included) equals that of a record in a sibling grid's output (the same
baseline in several tables of one paper, say) reuses that run: its record is copied with
``reused_from`` naming the source, and nothing is trained twice.

In a job of several processes (docs/multihost.md) every process runs the same units together:
process 0 decides what the file system says (is a unit recorded, is it held by another process, which
run can be reused, is the tree clean) and hands the answer to the others
(:func:`edge_jax.distributed.on_lead`), holds the units' locks and writes every file; a unit that
fails ends the job (the others would wait for it forever), where a single process logs it and goes on.
Records carry the process count and the device layout.

Every record names the commit it was made at and the command that made it. A working tree with
uncommitted changes is refused (before the first unit, and again before each record is written, since
a long grid may outlive an edit) unless ``allow_dirty``; such records keep the sha256 of ``git diff
HEAD`` and their tables say so. A clean grid never reuses a dirty record. The training
function and the config loader are injectable (tests pass fakes); by default they
are the runner that :data:`edge_jax.registry.RUNNERS` holds for the config's task
(``lm``: edge_jax.train.loop.train_and_evaluate) and edge_jax.config.load_config.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import socket
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

from edge_jax import distributed
from edge_jax.errors import Preempted, UserError, one_line
from edge_jax.grid import locks
from edge_jax.grid.post import PostCannotRun
from edge_jax.grid.records import has_record, load_records
from edge_jax.grid.reuse import find_identical_run, sibling_outputs
from edge_jax.grid.spec import Grid
from edge_jax.grid.stages import data_key
from edge_jax.grid.stages import resolve as resolve_stages
from edge_jax.utils import storage
from edge_jax.utils.atomic import write_json_atomic, write_text_atomic
from edge_jax.utils.provenance import command_line, device_info, git_info, versions

RECORD_VERSION = 1
TrainFn = Callable[[Any, str], dict]
LoadConfigFn = Callable[[str, dict], Any]


class GridRunError(UserError, RuntimeError):
    """The output directory or working tree cannot be used for this grid (one-line message)."""


@dataclasses.dataclass(frozen=True)
class Unit:
    """One cell x seed; `index` is its K for --list / --cell."""
    index: int
    cell: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.cell}__seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.cell} seed {self.seed}"


@dataclasses.dataclass
class RunSummary:
    ran: list[Unit] = dataclasses.field(default_factory=list)
    reused: list[Unit] = dataclasses.field(default_factory=list)
    skipped: list[Unit] = dataclasses.field(default_factory=list)
    failed: list[tuple[Unit, str]] = dataclasses.field(default_factory=list)
    held: list[Unit] = dataclasses.field(default_factory=list)   # being run by another process


def plan(grid: Grid, seeds: int) -> list[Unit]:
    """All cell x seed units, seed-major: every cell of seed 0 comes first, so a
    grid stopped halfway already has one full seed to tabulate."""
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    units = [(cell, s) for s in range(seeds) for cell in grid.cells]
    return [Unit(k, cell, s) for k, (cell, s) in enumerate(units)]


def record_path(out: str | Path, unit: Unit) -> Path:
    return storage.path(out) / "records" / f"{unit.name}.json"


def workdir(out: str | Path, unit: Unit) -> Path:
    return storage.path(out) / "runs" / unit.cell / f"seed{unit.seed}"


def lock_path(out: str | Path, unit: Unit) -> Path:
    """The unit's lock file, beside its workdir (:mod:`edge_jax.grid.locks`)."""
    return storage.path(out) / "runs" / unit.cell / f"seed{unit.seed}.lock"


def _default_train_fn(config, wd: str) -> dict:
    """Run ``config`` in ``wd`` with the runner registered for its task (``lm``: train and evaluate)."""
    from edge_jax.config import task_of
    from edge_jax.registry import RUNNERS
    return RUNNERS.get(task_of(config))(config, wd)


def default_load_config(base: str, overrides: dict):
    from edge_jax.config import load_config
    return load_config(base, overrides)


def run_grid(grid: Grid, out: str | Path, units: Iterable[Unit], *,
             extra_overrides: dict[str, Any] | None = None,
             train_fn: TrainFn | None = None,
             load_config: LoadConfigFn | None = None,
             log: Callable[[str], None] = print, reuse: bool = True, allow_dirty: bool = False,
             command: str | None = None) -> RunSummary:
    """Run every unit that has no record yet, each under its lock (:func:`lock_path`): a unit another process
    holds is logged with its holder and left to it; a failing unit is logged and left out.
    With ``reuse``, records in the sibling directories of ``out`` may stand in for runs.
    ``command`` is stored in each record (default: this process's command line)."""
    out = storage.path(out)
    donors = sibling_outputs(out) if reuse else []
    distributed.on_lead("grid output", lambda: check_out_dir(grid, out))
    if _provenance(grid, allow_dirty).get("commit") is None:
        log(f"warning: {grid.path} is not in a git repository; its records will name no commit")
    command = command or command_line()
    train_fn = train_fn or _default_train_fn
    load_config = load_config or default_load_config
    units = list(units)
    summary = RunSummary()
    for i, unit in enumerate(units):
        tag, path, lock = f"[{i + 1}/{len(units)}] {unit.label}", record_path(out, unit), lock_path(out, unit)
        if distributed.on_lead(f"record {unit.name}", lambda: has_record(path, log)):
            log(f"{tag}: skipped, record exists ({path})")
            summary.skipped.append(unit)
            continue
        with locks.try_locked(lock, command) as holder:
            if holder is not None:   # its holder runs it and writes its record
                log(f"{tag}: being run by {locks.who(holder)} (lock {lock}); skipped")
                summary.held.append(unit)
            elif distributed.on_lead(f"record {unit.name} locked", lambda: has_record(path, log)):
                log(f"{tag}: skipped, record exists ({path}; written by another process meanwhile)")
                summary.skipped.append(unit)
            else:
                _run_logged(grid, unit, out, tag, summary, log, extra_overrides=extra_overrides, train_fn=train_fn,
                            load_config=load_config, reuse_from=donors, allow_dirty=allow_dirty, command=command)
    return summary


def _run_logged(grid: Grid, unit: Unit, out: Path, tag: str, summary: RunSummary, log: Callable[[str], None],
                **kwargs) -> None:
    """:func:`run_unit`, its outcome logged and counted in ``summary``; a failing unit is left out (where a
    single process runs) or ends the job (where several do: the others may wait for it inside the unit)."""
    log(f"{tag}: running in {workdir(out, unit)}")
    try:
        record = run_unit(grid, unit, out, **kwargs)
    except Preempted:  # SIGTERM: the unit saved a checkpoint and stays unfinished (no record); the grid stops
        log(f"{tag}: preempted; unfinished, its checkpoint is in {workdir(out, unit)} (rerun the grid to resume)")
        raise
    except Exception as e:  # noqa: BLE001 - one cell failing must not stop the grid
        msg = one_line(e)
        log_file = workdir(out, unit) / "error.log"
        try:
            write_text_atomic(log_file, traceback.format_exc())
            where = f" (traceback: {log_file})"
        except OSError:
            where = ""
        log(f"FAILED {unit.label}: {type(e).__name__}: {msg}{where}")
        if distributed.process_count() > 1:
            raise  # the other processes may wait for this one inside the unit: end the job
        summary.failed.append((unit, f"{type(e).__name__}: {msg}"))
        return
    value = record["metrics"].get(grid.metric)
    if record.get("reused_from"):
        log(f"{tag}: reused {record['reused_from']}, {grid.metric}={_short(value)}")
        summary.reused.append(unit)
    else:
        log(f"{tag}: done, {grid.metric}={_short(value)} in {record['wall_time_s']:.1f} s")
        summary.ran.append(unit)


def run_unit(grid: Grid, unit: Unit, out: str | Path, *,
             extra_overrides: dict[str, Any] | None = None,
             train_fn: TrainFn = _default_train_fn,
             load_config: LoadConfigFn = default_load_config,
             reuse_from: Iterable[Path] = (), allow_dirty: bool = False,
             command: str | None = None) -> dict:
    """Train one cell x seed in its workdir (or reuse an identical run) and write its record."""
    t0 = time.time()
    started_at = _now()
    overrides = grid.overrides(unit.cell, unit.seed, extra_overrides)
    if grid.stages:
        overrides = resolve_stages(overrides, grid.stages, unit.seed, storage.absolute(out).parent, train_fn,
                                   load_config)
    config = load_config(grid.base, overrides)
    documents = data_key(config)
    donor = distributed.on_lead(f"reuse {unit.name}", lambda: _donor(reuse_from, config, grid.metric, allow_dirty,
                                                                       documents))
    if donor is not None:
        _provenance(grid, allow_dirty)
        record = dict(donor[1], grid=grid.name, title=grid.title, ablation_file=grid.path, preset=grid.preset,
                      cell=unit.cell, base=grid.base, overrides=_jsonable(overrides), reused_from=str(donor[0]))
        write_json_atomic(record_path(out, unit), record)
        return record
    wd = workdir(out, unit)
    resumed = distributed.on_lead(f"workdir {unit.name}", lambda: _claim_workdir(wd, grid, overrides))
    result = train_fn(config, str(wd))
    if not isinstance(result, dict):
        raise TypeError(f"train function returned {type(result).__name__}, not a dict")
    metrics = _jsonable(result)
    if grid.metric not in metrics:
        raise KeyError(f"result has no {grid.metric!r}; keys: {', '.join(sorted(metrics))}")
    curves = read_curves(wd / "metrics.jsonl")
    git = _provenance(grid, allow_dirty)   # the tree may have changed while this unit trained
    record = {
        "record_version": RECORD_VERSION,
        "grid": grid.name,
        "title": grid.title,
        "ablation_file": grid.path,
        "preset": grid.preset,
        "cell": unit.cell,
        "seed": unit.seed,
        "base": grid.base,
        "overrides": _jsonable(overrides),
        "config": _config_dict(config),
        "data_key": documents,
        "git": git,
        "command": command or command_line(),
        "cwd": str(Path.cwd()),
        "metrics": metrics,
        "curve": curves["val_loss"],
        "train_curve": curves["train_loss"],
        "resumed": resumed,
        "wall_time_s": round(time.time() - t0, 3),
        "started_at": started_at,
        "finished_at": _now(),
        "device": device_info(),   # platform, device and process counts
        "versions": versions(),
        "host": socket.gethostname(),
        "workdir": str(wd),
    }
    try:    # stored so that a record alone gives it, without its workdir (reused, copied, or on another host)
        record["vocab_size"] = resolved_vocab_size(record)
    except PostCannotRun:
        pass    # a train function that writes no config.json; readers then say so
    write_json_atomic(record_path(out, unit), record)
    if distributed.is_lead():
        (wd / "error.log").unlink(missing_ok=True)
    return record


def check_provenance(grid: Grid, allow_dirty: bool) -> dict:
    """The git info of the ablation file's working tree; refused when it has uncommitted changes,
    unless ``allow_dirty``."""
    where = Path(grid.path).resolve().parent
    info = git_info(where)
    if info.get("dirty") and not allow_dirty:
        raise GridRunError(f"the working tree of {where} has uncommitted changes, so records could not be "
                           "tied to a commit; commit them (or run from a clean worktree) or pass --allow-dirty")
    return info


def _provenance(grid: Grid, allow_dirty: bool) -> dict:
    """:func:`check_provenance` of process 0's tree, on every process."""
    return distributed.on_lead("provenance", lambda: check_provenance(grid, allow_dirty))


def _donor(dirs, config, metric: str, allow_dirty: bool, documents: str) -> list | None:
    """:func:`find_identical_run` as JSON (``[path, record]``), for :func:`edge_jax.distributed.on_lead`."""
    found = find_identical_run(dirs, _config_dict(config), metric, clean_only=not allow_dirty, documents=documents)
    return None if found is None else [str(found[0]), found[1]]


def _claim_workdir(wd: Path, grid: Grid, overrides: dict) -> bool:
    """Create the workdir, or check that the run already in it is this one.

    Returns True when there is earlier work to resume. A workdir made with other
    settings (say another --set train.steps) is refused rather than resumed.
    """
    stamp = {"grid": grid.name, "preset": grid.preset, "base": grid.base,
             "overrides": _jsonable(overrides)}
    stamp_file = wd / "grid_run.json"
    if stamp_file.exists():
        old = json.loads(stamp_file.read_text())
        if old != stamp:
            changed = sorted(k for k in set(old) | set(stamp) if old.get(k) != stamp.get(k))
            raise GridRunError(f"workdir {wd} holds a run with different {', '.join(changed)}; "
                               "delete it or use another --out")
    wd.mkdir(parents=True, exist_ok=True)
    # (a bucket has no empty directories: a prefix with no object under it is not there)
    resumed = wd.exists() and any(p.name not in ("grid_run.json", "error.log") for p in wd.iterdir())
    if not stamp_file.exists():
        write_json_atomic(stamp_file, stamp)
    return resumed


def check_out_dir(grid: Grid, out: str | Path) -> None:
    """Refuse an output dir whose records belong to another grid or preset."""
    for rec in load_records(out):
        if rec.get("grid") != grid.name or rec.get("preset") != grid.preset:
            raise GridRunError(
                f"{out} holds records of grid {rec.get('grid')!r} preset {rec.get('preset')!r}, "
                f"not {grid.name!r} preset {grid.preset!r}; use another --out")


def read_curves(metrics_path: str | Path) -> dict[str, list[list[float]]]:
    """[[step, value], ...] for val_loss (eval lines) and loss (train lines).

    A resumed run may log a step twice; the later line wins. Sorted by step.
    """
    from edge_jax.train.metrics import read_jsonl
    val: dict[int, float] = {}
    train: dict[int, float] = {}
    for row in read_jsonl(str(metrics_path)):
        if not isinstance(row, dict) or "step" not in row:
            continue
        if row.get("kind") == "eval" and _is_number(row.get("val_loss")):
            val[int(row["step"])] = float(row["val_loss"])
        elif row.get("kind") == "train" and _is_number(row.get("loss")):
            train[int(row["step"])] = float(row["loss"])
    return {"val_loss": [[s, val[s]] for s in sorted(val)],
            "train_loss": [[s, train[s]] for s in sorted(train)]}


def resolved_vocab_size(record: dict) -> int:
    """A record's vocabulary size: its config's, else the ``vocab_size`` the runner stores beside it
    (configs keep 0 when the tokenizer sets it), else the run's own ``config.json`` (records written
    before the runner stored it). None of them: :class:`PostCannotRun` (a post hook that needs it keeps its
    outputs)."""
    vocab = int(record["config"].get("model", {}).get("vocab_size") or 0) or int(record.get("vocab_size") or 0)
    config_file = storage.path(record.get("workdir") or ".") / "config.json"
    if vocab <= 0 and record.get("workdir") and config_file.exists():
        vocab = int(json.loads(config_file.read_text())["model"]["vocab_size"])
    if vocab <= 0:
        raise PostCannotRun(f"vocabulary size unknown for the {record.get('cell')} seed {record.get('seed')} "
                            f"record: it stores none and its workdir {record.get('workdir')} has no config.json "
                            "here; rerun the cell")
    return vocab


def _config_dict(config) -> dict:
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return json.loads(json.dumps(raw, default=str))


def _jsonable(x):
    """Plain JSON types from numpy / jax scalars and arrays; anything else -> str."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if hasattr(x, "tolist"):          # numpy / jax arrays and scalars
        return _jsonable(x.tolist())
    return str(x)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x) -> str:
    return f"{x:.4g}" if _is_number(x) and math.isfinite(x) else str(x)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
