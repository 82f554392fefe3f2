"""edge_jax.grid.records: a record counts once (a copy under another name is warned about or refused), an
unreadable record is left out and named, and the grid runs its unit again (the file moved aside)."""
import json
import textwrap

import pytest
from test_grid_runner import ABLATION, FakeTrain, cli

from edge_jax.grid import spec, summary, tables
from edge_jax.grid.records import DuplicateRecordError, load_records


@pytest.fixture
def ablation(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(textwrap.dedent(ABLATION))
    return path


def _write(out, name, cell="cosine", seed=0, value=3.0, **extra):
    (out / "records").mkdir(parents=True, exist_ok=True)
    rec = {"grid": "toy", "preset": "tiny", "cell": cell, "seed": seed, "metrics": {"val_loss": value}, **extra}
    (out / "records" / name).write_text(json.dumps(rec))
    return out / "records" / name


def test_a_copy_with_equal_values_counts_once_with_one_warning(tmp_path):
    _write(tmp_path, "cosine__seed0.json")
    _write(tmp_path, "a_copy.json")          # sorts first: the runner's own name is still the one kept
    logs = []
    records = load_records(tmp_path, logs.append)
    assert len(records) == 1 and [p.name for p in records.paths] == ["cosine__seed0.json"]
    assert len(logs) == 1 and logs[0].startswith("warning: ") and "a_copy.json repeats the record" in logs[0]
    assert "cosine__seed0.json" in logs[0] and "delete a_copy.json" in logs[0]


def test_a_copy_with_other_values_is_refused_naming_which_to_delete(tmp_path):
    _write(tmp_path, "cosine__seed0.json")
    _write(tmp_path, "zz.json", value=4.0)
    with pytest.raises(DuplicateRecordError, match=r"cosine__seed0.json and .*zz.json are both the record of cell "
                                                   r"'cosine' seed 0 .* different values; delete .*zz.json"):
        load_records(tmp_path)


def test_records_of_other_seeds_or_presets_are_not_duplicates(tmp_path):
    _write(tmp_path, "cosine__seed0.json")
    _write(tmp_path, "cosine__seed1.json", seed=1, value=4.0)
    _write(tmp_path, "other.json", preset="small", value=5.0)
    assert len(load_records(tmp_path)) == 3


def test_unreadable_records_are_left_out_and_listed(tmp_path):
    _write(tmp_path, "cosine__seed0.json")
    (tmp_path / "records" / "wsd__seed0.json").write_text('{"grid": "to')
    (tmp_path / "records" / "list.json").write_text("[1, 2]")
    logs = []
    records = load_records(tmp_path, logs.append)
    assert len(records) == 1
    assert [(p.name, why.split(":")[0]) for p, why in records.unreadable] == [
        ("list.json", "not a grid record (no cell and seed)"), ("wsd__seed0.json", "JSONDecodeError")]
    assert len(logs) == 2 and all(line.startswith("warning: unreadable record ") for line in logs)


def test_a_truncated_record_is_moved_aside_and_its_unit_run_again(ablation, tmp_path):
    out = tmp_path / "out"
    assert cli([ablation, "--out", out, "--seeds", 1], FakeTrain())[0] == 0
    path = out / "records" / "wsd__seed0.json"
    path.write_text(path.read_text()[:40])
    rc, logs = cli([ablation, "--out", out, "--seeds", 1, "--list"])
    assert "1\twsd\t0\tunreadable" in logs
    train = FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 1], train)
    assert rc == 0 and train.calls == [("wsd", 0)]
    warned = [line for line in logs if line.startswith("warning: unreadable")]
    assert len(warned) == 1 and "records.corrupt" in warned[0] and "running the unit again" in warned[0]
    assert json.loads(path.read_text())["cell"] == "wsd"
    assert len((out / "records.corrupt" / "wsd__seed0.json").read_text()) == 40   # the truncated file, kept
    assert "toy: 1 ran, 0 reused, 2 skipped" in " ".join(logs)


def test_the_table_counts_a_copied_record_once(ablation, tmp_path):
    out = tmp_path / "out"
    assert cli([ablation, "--out", out, "--seeds", 1], FakeTrain())[0] == 0
    (out / "records" / "copy.json").write_text((out / "records" / "cosine__seed0.json").read_text())
    rc, logs = cli([ablation, "--out", out, "--seeds", 1, "--tables-only"])
    assert rc == 0 and sum("copy.json repeats the record" in line for line in logs) == 1
    table = tables.build_table(spec.load_grid(ablation, "tiny"), load_records(out))
    assert next(r for r in table.rows if r.cell == "cosine").stats["val_loss"].n == 1


def test_summary_names_unreadable_records_in_its_row(ablation, tmp_path):
    results = tmp_path / "results"
    out = results / "toy"
    _write(out, "cosine__seed0.json", value=3.0)
    _write(out, "wsd__seed0.json", cell="wsd", value=2.9)
    (out / "records" / "wsdc__seed0.json").write_text("{")
    logs = []
    rows = summary.summarize(tmp_path, results, log=logs.append)
    assert rows[0].unreadable == [(out / "records" / "wsdc__seed0.json").as_posix()]
    line = summary.markdown(rows).splitlines()[-1]
    assert line.endswith(f"; 1 unreadable record: {(out / 'records' / 'wsdc__seed0.json').as_posix()} |")
    assert any("unreadable record" in entry and "wsdc__seed0.json" in entry for entry in logs)
