"""Reuse across sibling grids reads older records in today's config keys."""
import json


def test_a_record_written_before_a_config_key_was_added_is_still_reused(tmp_path):
    """Keys the schema gained since (e.g. init_step) read as their defaults in an older record."""
    from edge_jax.config import load_config
    from edge_jax.grid.reuse import find_identical_run
    config = json.loads(json.dumps(load_config("configs/lm.py:size=tiny", {"seed": 1}).to_dict(), default=str))
    older = json.loads(json.dumps(config))
    del older["init_step"], older["data"]["stream"]
    (tmp_path / "g" / "records").mkdir(parents=True)
    record = {"cell": "a", "seed": 1, "config": older, "metrics": {"val_loss": 2.0}, "data_key": "k"}
    (tmp_path / "g" / "records" / "a__seed1.json").write_text(json.dumps(record))
    found = find_identical_run([tmp_path / "g"], config, "val_loss", documents="k")
    assert found is not None and found[1]["metrics"] == {"val_loss": 2.0}
    config["train"]["steps"] += 1                      # a real difference still tells them apart
    assert find_identical_run([tmp_path / "g"], config, "val_loss", documents="k") is None
