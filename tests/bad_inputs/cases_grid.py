"""`edge-jax grid` and `edge-jax summary`: ablation files that cannot load, a dirty working tree, a unit index
out of range, an output dir of another grid, arguments that do not combine (each refused before a unit
trains); and the records and outputs a grid reads: a record copied under another name (counted once, or
refused when the copies differ), an unreadable record (run again; named by summary), a post hook whose
inputs are not here (its outputs kept), a --results directory that does not exist. The ablation is a
two-cell toy committed in a fresh git repository under {tmp}/repo (the repository's own tree is shared with
other work and may be dirty)."""
import json
import subprocess
import textwrap

from harness import Case, both, write_file

TOY = """
def get_grid(preset):
    return {
        "name": "toy", "title": "Toy table", "base": "configs/lm.py:size=tiny",
        "base_overrides": {"train.steps": 4, "train.warmup_steps": 1},
        "cells": {"cosine": {"train.schedule": "cosine"}, "wsd": {"train.schedule": "wsd"}},
        "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
        "paper": {"metric": "val_loss", "values": {}, "higher_is_better": False, "order": ["wsd", "cosine"],
                  "source": "toy"},
        "notes": "",{post}
    }
"""
GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false"]


def _repo(edit: str = "", files: dict | None = None, post: str = ""):
    """setup: {tmp}/repo/toy.py committed in a new git repository (then ``edit`` appended, uncommitted),
    and ``files`` (path under {tmp} -> JSON-able record, or text as it is) written. ``post``: the toy's
    post hook ("module:function")."""
    def setup(ctx):
        repo = ctx.tmp / "repo"
        repo.mkdir()
        (repo / "toy.py").write_text(textwrap.dedent(TOY.replace("{post}", f' "post": "{post}",' if post else "")))
        for cmd in (["init", "-q"], ["add", "toy.py"], ["commit", "-qm", "toy"]):
            subprocess.run(GIT + cmd, cwd=repo, check=True, capture_output=True)
        if edit:
            (repo / "toy.py").write_text((repo / "toy.py").read_text() + edit)
        for rel, record in (files or {}).items():
            path = ctx.tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(record if isinstance(record, str) else json.dumps(record))
    return setup


def _record(cell: str, seed: int, value: float, **extra) -> dict:
    """A finished record of the toy grid as the runner writes it (its config loaded from the toy's cell)."""
    from edge_jax.config import load_config
    from edge_jax.grid.runner import _config_dict
    overrides = {"train.steps": 4, "train.warmup_steps": 1, "train.schedule": cell, "seed": seed}
    return {"record_version": 1, "grid": "toy", "title": "Toy table", "preset": "tiny", "cell": cell, "seed": seed,
            "base": "configs/lm.py:size=tiny", "overrides": overrides,
            "config": _config_dict(load_config("configs/lm.py:size=tiny", overrides)), "metrics": {"val_loss": value},
            "curve": [], "git": {"commit": "0" * 40, "dirty": False}, "command": "edge-jax grid toy.py",
            "workdir": f"/nowhere/toy/runs/{cell}/seed{seed}", **extra}


def _records(out: str = "out", copy: float | None = None, corrupt: str = "", post: str = ""):
    """setup: the toy repo with both cells' seed-0 records in {tmp}/``out``/records; ``copy``: a copy of the
    cosine record under another file name, holding this value; ``corrupt``: a file name under records holding
    a truncated record; ``post``: the toy's post hook."""
    def setup(ctx):
        files = {f"{out}/records/{c}__seed0.json": _record(c, 0, v) for c, v in (("cosine", 4.806), ("wsd", 4.7))}
        if copy is not None:
            files[f"{out}/records/copy_of_cosine.json"] = _record("cosine", 0, copy)
        if corrupt:
            files[f"{out}/records/{corrupt}"] = TRUNCATED
        _repo(files=files, post=post)(ctx)
    return setup


def _table_counts_once(ctx, out):
    table = (ctx.tmp / "out" / "table.md").read_text()
    assert "| cosine | 1 | 4.806 |" in table, table


def _rerun_unit(ctx, out):
    rec = json.loads((ctx.tmp / "out" / "records" / "cosine__seed0.json").read_text())
    assert rec["cell"] == "cosine" and rec["seed"] == 0 and "val_loss" in rec["metrics"], out
    assert (ctx.tmp / "out" / "records.corrupt" / "cosine__seed0.json").read_text() == TRUNCATED, out


TRUNCATED = '{"record_version": 1, "grid": "toy", "preset": "ti'
SUMMARY = ["summary", "--ablations", "{tmp}/repo", "--results", "{tmp}/results"]   # the toy's out: results/toy
KV_HOOK = "edge_jax.papers.plm.kv_cache:write_attention_report"    # times decoding in each cell's workdir
FIT_HOOK = "edge_jax.papers.meki.scaling:write_memory_fit"         # needs each run's vocabulary size
TABLES = ("out/table.*", "out/pairs.csv")   # what --tables-only rewrites


def grid(*extra: str, ablation: str = "{tmp}/repo/toy.py") -> list[str]:
    return ["grid", ablation, "--out", "{tmp}/out", "--seeds", "1", *extra]


OTHER_RECORD = {"out/records/x__seed0.json": {"grid": "other", "preset": "tiny", "cell": "x", "seed": 0}}
CASES = [
    Case("grid_ablation_missing", grid(ablation="{tmp}/nope.py"), ("nope.py", "not found")),
    Case("grid_ablation_import_fails", grid(ablation="{tmp}/bad.py"), "import failed: ModuleNotFoundError",
         setup=write_file("bad.py", "import no_such_module_here\n")),
    Case("grid_ablation_without_get_grid", grid(ablation="{tmp}/noget.py"), "defines no get_grid(preset) function",
         setup=write_file("noget.py", "GRID = {}\n")),
    Case("grid_dirty_tree", grid(), ("has uncommitted changes", "--allow-dirty"), setup=_repo(edit="# an edit\n")),
    Case("grid_cell_out_of_range", grid("--cell", "7"), "--cell 7 out of range; valid: 0..1", setup=_repo()),
    Case("grid_out_holds_another_grid", grid(), "holds records of grid 'other' preset 'tiny'",
         setup=_repo(files=OTHER_RECORD)),
    Case("grid_set_seed", grid("--set", "seed=3"), "--set seed=... is not allowed; use --seeds", setup=_repo()),
    Case("grid_set_without_equals", grid("--set", "noequals"), "--set expects KEY=VALUE", setup=_repo()),
    Case("grid_config_override", grid("--config.train.steps=3"), "use --set KEY=VALUE", setup=_repo()),
    Case("grid_list_and_cell", grid("--list", "--cell", "0"), "not allowed with argument", setup=_repo()),
    Case("grid_compile_only_without_topology", grid("--compile-only"), "--compile-only needs --topology",
         setup=_repo()),
    Case("grid_compile_only_unknown_topology", grid("--compile-only", "--topology", "v9-8"), "unknown topology 'v9-8'",
         setup=_repo()),
    # records count once; outputs are never replaced by less (issue 54)
    Case("grid_record_copied_under_another_name", grid("--tables-only"),
         ("warning: ", "copy_of_cosine.json repeats the record", "cosine__seed0.json", "counted once"), code=0,
         setup=_records(copy=4.806), check=_table_counts_once, changes=TABLES),
    Case("grid_record_copies_differ", grid("--tables-only"),
         ("cosine__seed0.json and ", "different values", "delete ", "copy_of_cosine.json (the runner writes"),
         setup=_records(copy=3.5)),
    Case("grid_record_unreadable_is_run_again", grid("--cell", "0"),
         ("warning: unreadable record ", "cosine__seed0.json", "records.corrupt", "running the unit again"), code=0,
         setup=_records(corrupt="cosine__seed0.json"), check=_rerun_unit, changes=True),
    Case("grid_post_hook_without_workdirs_keeps_its_output", grid("--tables-only"),
         ("toy post: decode.md kept as it is", "workdirs are not here", "run the grid to remeasure"), code=0,
         setup=both(_records(post=KV_HOOK), write_file("out/decode.md", "measured before\n")), changes=TABLES),
    Case("grid_post_hook_without_vocabulary_keeps_its_output", grid("--tables-only"),
         ("toy post: not run", "stays as it is", "vocabulary size unknown"), code=0,
         setup=both(_records(post=FIT_HOOK), write_file("out/fit.md", "fitted before\n")), changes=TABLES),
    Case("summary_names_an_unreadable_record", SUMMARY, ("[toy]", "1 unreadable record: ", "toy/records/b.json"),
         code=0, setup=_records(out="results/toy", corrupt="b.json")),
    Case("summary_results_missing", ["summary", "--ablations", "{tmp}/repo", "--results", "{tmp}/nope"],
         ("--results", "nope does not exist"), setup=_repo()),
]
