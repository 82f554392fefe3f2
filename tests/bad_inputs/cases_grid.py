"""`edge-jax grid` refusals: ablation files that cannot load, a dirty working tree, a unit index out of
range, an output dir of another grid, arguments that do not combine. Every row refuses before a unit
trains. The ablation is a two-cell toy committed in a fresh git repository under {tmp}/repo (the
repository's own tree is shared with other work and may be dirty)."""
import json
import subprocess
import textwrap

from harness import Case, write_file

TOY = """
def get_grid(preset):
    return {
        "name": "toy", "title": "Toy table", "base": "configs/lm.py:size=tiny",
        "base_overrides": {"train.steps": 4, "train.warmup_steps": 1},
        "cells": {"cosine": {"train.schedule": "cosine"}, "wsd": {"train.schedule": "wsd"}},
        "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
        "paper": {"metric": "val_loss", "values": {}, "higher_is_better": False, "order": ["wsd", "cosine"],
                  "source": "toy"},
        "notes": "",
    }
"""
GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false"]


def _repo(edit: str = "", files: dict | None = None):
    """setup: {tmp}/repo/toy.py committed in a new git repository (then ``edit`` appended, uncommitted),
    and ``files`` (path under {tmp} -> JSON-able record) written."""
    def setup(ctx):
        repo = ctx.tmp / "repo"
        repo.mkdir()
        (repo / "toy.py").write_text(textwrap.dedent(TOY))
        for cmd in (["init", "-q"], ["add", "toy.py"], ["commit", "-qm", "toy"]):
            subprocess.run(GIT + cmd, cwd=repo, check=True, capture_output=True)
        if edit:
            (repo / "toy.py").write_text((repo / "toy.py").read_text() + edit)
        for rel, record in (files or {}).items():
            path = ctx.tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))
    return setup


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
]
