"""edge_jax.grid.post: a post hook whose inputs are not here keeps its outputs as they are (one line); the
hooks of the committed ablations that read workdirs do so."""
import json
import textwrap
from pathlib import Path

import pytest
from test_grid_runner import ABLATION, FakeTrain, cli

from edge_jax.grid import spec
from edge_jax.grid.post import PostCannotRun, absent_inputs, run_post

CALLS = []


def cannot_run(grid, records, out):
    """A toy hook: its inputs (the workdirs) are absent; it names report.md, which it would write."""
    CALLS.append(len(records))
    raise PostCannotRun("the cells' workdirs are not here; run the grid to remeasure", [out / "report.md"])


def writes_report(grid, records, out):
    (out / "report.md").write_text(f"{len(records)} records\n")
    return [out / "report.md"]


@pytest.fixture
def ablation(tmp_path):
    def with_post(hook):
        path = tmp_path / "toy.py"
        path.write_text(textwrap.dedent(ABLATION).replace('"notes": "toy notes",',
                                                          f'"notes": "toy notes", "post": "{hook}",'))
        return path
    return with_post


def test_a_hook_that_cannot_run_keeps_the_existing_output(ablation, tmp_path):
    out = tmp_path / "out"
    path = ablation("test_grid_post:writes_report")
    assert cli([path, "--out", out, "--seeds", 1], FakeTrain())[0] == 0
    assert (out / "report.md").read_text() == "3 records\n"
    path = ablation("test_grid_post:cannot_run")
    rc, logs = cli([path, "--out", out, "--seeds", 1, "--tables-only"])
    assert rc == 0 and CALLS[-1] == 3
    assert (out / "report.md").read_text() == "3 records\n"
    assert ("toy post: report.md kept as it is: the cells' workdirs are not here; run the grid to remeasure"
            in logs)


def test_a_hook_that_cannot_run_and_wrote_nothing_before_says_so(ablation, tmp_path):
    out = tmp_path / "out"
    rc, logs = cli([ablation("test_grid_post:cannot_run"), "--out", out, "--seeds", 1], FakeTrain())
    assert rc == 0 and not (out / "report.md").exists()
    assert any(line.startswith("toy post: report.md not written: ") for line in logs)


def test_absent_inputs_names_missing_workdirs_and_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "sparsity.json").write_text("{}")
    (tmp_path / "b").mkdir()
    records = [{"cell": "a", "seed": 0, "workdir": str(tmp_path / "a")},
               {"cell": "b", "seed": 0, "workdir": str(tmp_path / "b")},
               {"cell": "c", "seed": 0}]
    assert absent_inputs(records[:2]) == []
    assert absent_inputs(records, "sparsity.json") == [str(tmp_path / "b" / "sparsity.json"),
                                                       "(no workdir in the c seed 0 record)"]


class Grid:
    name, title, metric, cells = "g", "G", "val_loss", ("a", "b")

    def __init__(self, post):
        self.post = post


def _records(tmp_path):
    return [{"grid": "g", "preset": "tiny", "cell": c, "seed": 0, "metrics": {"val_loss": 1.0},
             "config": {"model": {"vocab_size": 0, "n_layers": 2, "d_mem": 4}},
             "workdir": str(tmp_path / "gone" / c)} for c in ("a", "b")]


@pytest.mark.parametrize("hook, outputs, says", [
    ("edge_jax.papers.plm.kv_cache:write_attention_report", ("decode.md",),
     "g post: decode.md kept as it is (decode.png not written): 2 of the 2 cells' workdirs are not here"),
    ("edge_jax.papers.plm.sparsity_report:write_sparsity_curves", ("sparsity.md", "sparsity.csv", "sparsity.png"),
     "g post: sparsity.md, sparsity.csv, sparsity.png kept as they are: 2 of the 2 runs' sparsity.json are not here"),
    ("edge_jax.papers.meki.scaling:write_memory_fit", ("fit.md", "scaling.png"),
     "g post: not run, so what it wrote before stays as it is: vocabulary size unknown for the a seed 0 record"),
    ("edge_jax.papers.plm.arch_stats:write_arch_stats", ("arch_stats.md",),
     "g post: not run, so what it wrote before stays as it is: vocabulary size unknown for the a seed 0 record"),
])
def test_committed_hooks_without_their_inputs_keep_their_outputs(tmp_path, hook, outputs, says):
    for name in outputs:
        (tmp_path / name).write_text("measured before\n")
    logs = []
    assert run_post(Grid(hook), _records(tmp_path), tmp_path, logs.append) == []
    assert len(logs) == 1 and logs[0].startswith(says), logs
    assert all((tmp_path / name).read_text() == "measured before\n" for name in outputs)


def test_every_committed_post_hook_is_known():
    """Every post hook of ablations/ reads only records, or is one of the hooks above that say when their
    inputs are not here: a new hook must be added to one of the two."""
    hooks = {spec.load_grid(path, "tiny").post for path in sorted(Path("ablations").glob("*.py"))}
    readers = {"edge_jax.papers.expert_cache.report:write_policy_report",
               "edge_jax.papers.expert_cache.report:write_sensitivity_report",
               "edge_jax.papers.edgeinfinite.report:write_categories"}
    tested = {"edge_jax.papers.plm.kv_cache:write_attention_report",
              "edge_jax.papers.plm.sparsity_report:write_sparsity_curves",
              "edge_jax.papers.meki.scaling:write_memory_fit", "edge_jax.papers.plm.arch_stats:write_arch_stats"}
    assert hooks - {""} == readers | tested, json.dumps(sorted(hooks))
