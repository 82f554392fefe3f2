"""Run provenance in grid records: the commit and command of a clean tree, a dirty tree refused unless
``--allow-dirty`` (then the diff's sha256), a tree edited during a unit, and dirty records never reused.
Uses the toy ablation and fake training of :mod:`test_grid_runner`, committed in a fresh git repository."""
import hashlib
import json
import subprocess
import textwrap

import pytest
from test_grid_runner import ABLATION, FakeTrain, cli

GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]


@pytest.fixture
def repo_ablation(tmp_path):
    """The toy ablation file committed in a fresh git repository."""
    repo = tmp_path / "repo"
    repo.mkdir()
    try:
        subprocess.run(GIT + ["init", "-q"], cwd=repo, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git not available")
    path = repo / "toy.py"
    path.write_text(textwrap.dedent(ABLATION))
    subprocess.run(GIT + ["add", "toy.py"], cwd=repo, check=True)
    subprocess.run(GIT + ["commit", "-qm", "toy"], cwd=repo, check=True)
    return path


def test_clean_tree_records_name_the_commit_and_the_command(repo_ablation, tmp_path):
    out = tmp_path / "out"
    rc, logs = cli([repo_ablation, "--out", out, "--seeds", 1], FakeTrain())
    assert rc == 0 and not any("not in a git repository" in line for line in logs)
    rec = json.loads((out / "records" / "wsd__seed0.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_ablation.parent, capture_output=True, text=True)
    assert rec["git"] == {"commit": head.stdout.strip(), "dirty": False}
    assert isinstance(rec["command"], str) and rec["command"]


def test_dirty_tree_is_refused_unless_allow_dirty(repo_ablation, tmp_path, capsys):
    out = tmp_path / "out"
    repo_ablation.write_text(repo_ablation.read_text() + "\n# an edit\n")
    train = FakeTrain()
    rc, _ = cli([repo_ablation, "--out", out, "--seeds", 1], train)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and train.calls == [] and not (out / "records").exists()
    assert err.startswith("error: the working tree of ") and "--allow-dirty" in err and "\n" not in err
    rc, _ = cli([repo_ablation, "--out", out, "--seeds", 1, "--allow-dirty"], train)
    rec = json.loads((out / "records" / "wsd__seed0.json").read_text())
    assert rc == 0 and rec["git"]["dirty"] is True
    git = {k: subprocess.run(["git", *args], cwd=repo_ablation.parent, capture_output=True, check=True).stdout
           for k, args in {"head": ["rev-parse", "HEAD"], "diff": ["diff", "HEAD", "--binary"]}.items()}
    assert git["diff"] and rec["git"]["commit"] == git["head"].decode().strip()
    assert rec["git"]["diff_sha256"] == hashlib.sha256(git["diff"]).hexdigest()  # the edit, not any sha


def test_tree_dirtied_during_a_unit_fails_that_unit_and_keeps_its_workdir(repo_ablation, tmp_path):
    out = tmp_path / "out"

    class EditingTrain(FakeTrain):
        def __call__(self, config, workdir):
            result = super().__call__(config, workdir)
            if config.train.schedule == "wsd":
                repo_ablation.write_text(repo_ablation.read_text() + "\n# edited mid-run\n")
            return result

    rc, logs = cli([repo_ablation, "--out", out, "--seeds", 1], EditingTrain())
    assert rc == 1
    assert sorted(p.name for p in (out / "records").iterdir()) == ["cosine__seed0.json"]
    assert any(line.startswith("FAILED wsd seed 0: GridRunError: the working tree") for line in logs)
    assert (out / "runs" / "wsd" / "seed0" / "metrics.jsonl").exists()


def test_records_from_a_dirty_tree_are_not_reused_by_a_clean_grid(repo_ablation, tmp_path):
    first = tmp_path / "results" / "toy_a"
    original = repo_ablation.read_text()
    repo_ablation.write_text(original + "\n# dirty\n")
    cli([repo_ablation, "--out", first, "--seeds", 1, "--allow-dirty"], FakeTrain())
    repo_ablation.write_text(original.replace('"name": "toy"', '"name": "toy_b"'))
    subprocess.run(GIT + ["commit", "-qam", "toy_b"], cwd=repo_ablation.parent, check=True)
    train = FakeTrain()
    rc, _ = cli([repo_ablation, "--out", tmp_path / "results" / "toy_b", "--seeds", 1], train)
    assert rc == 0 and len(train.calls) == 3
