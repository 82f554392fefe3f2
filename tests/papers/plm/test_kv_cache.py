"""KV-cache bytes: PLM eqs. (6)-(7) against the decoder's cache arrays, the `analyze kv-cache` command,
the decode-overflow error and the plm_attention post hook (on tiny random models)."""
import dataclasses
import types

import jax.numpy as jnp
import pytest

from edge_jax.cli import main
from edge_jax.infer.decode import decode_tokens, init_cache, prefill
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.presets import sized_config
from edge_jax.papers.plm import kv_cache as K

MLA = ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=4, head_dim=8, d_ff=64,
                  qk_norm=False, ffn="relu2", attention="mla", kv_lora_rank=12, d_rope=4)
GQA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cfg", [MLA, GQA], ids=["mla", "gqa"])
def test_formula_matches_cache_arrays(cfg, dtype):
    cfg = dataclasses.replace(cfg, dtype=dtype, param_dtype=dtype)
    bits = K.dtype_bits(dtype)
    f = K.formula_bytes(cfg, bits)
    expect = (cfg.d_rope + cfg.kv_lora_rank) if cfg.attention == "mla" else 2 * cfg.n_kv_heads * cfg.head_dim
    assert f["elements_per_layer"] == expect and f["equation"] == ("(7)" if cfg.attention == "mla" else "(6)")
    assert f["bytes"] == cfg.n_layers * expect * bits / 8
    real = K.cache_bytes(DecoderLM(cfg), batch=2, max_len=10)  # small: auto picks real arrays
    abstract = K.cache_bytes(DecoderLM(cfg), batch=2, max_len=10, materialize=False)
    assert real["measured_from"] == "real arrays" and abstract["measured_from"].startswith("abstract")
    for m in (real, abstract):
        assert m["elements_per_layer"] == expect and m["layers"] == cfg.n_layers
        assert m["bytes_per_token"] == f["bytes"]
        assert m["total_bytes"] == f["bytes"] * 2 * 10
    assert {dt for _, dt in real["arrays"].values()} == {dtype}


def test_plm_1p8b_abstract_numbers():
    cfg = ModelConfig.from_config(sized_config("plm_1p8b").model)
    twin = K.gqa_twin(cfg)
    assert (twin.attention, twin.n_kv_heads, twin.head_dim) == ("gqa", 16, 128)
    f, ft = K.formula_bytes(cfg, 16), K.formula_bytes(twin, 16)
    assert (f["elements_per_layer"], ft["elements_per_layer"]) == (576, 4096)
    assert round(f["bytes"] / ft["bytes"], 4) == 0.1406
    assert f["bytes"] == 32 * 576 * 2
    m = K.cache_bytes(DecoderLM(cfg), 1, 4096, materialize=False)
    mt = K.cache_bytes(DecoderLM(twin), 1, 4096)  # 1 GiB of bfloat16: auto stays abstract
    assert m["measured_from"].startswith("abstract") and mt["measured_from"].startswith("abstract")
    assert (m["elements_per_layer"], mt["elements_per_layer"]) == (576, 4096)
    assert (m["bytes_per_token"], mt["bytes_per_token"]) == (f["bytes"], ft["bytes"])
    assert mt["total_bytes"] == 2**30
    with pytest.raises(ValueError, match="MLA"):
        K.gqa_twin(twin)


def test_analyze_kv_cache_command(capsys):
    assert main(["analyze", "kv-cache", "--config", "configs/plm.py:size=tiny", "--tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "48 = d_c 32 + d_rope 16" in out and "256 = 2 x 4 x 32" in out
    assert "48 / 256 = 0.1875" in out and "real arrays" in out
    assert main(["analyze", "kv-cache", "--config", "configs/plm.py:size=tiny", "--tokens", "16", "--bits", "8",
                 "--config.model.kv_lora_rank=48"]) == 0
    out = capsys.readouterr().out
    assert "64 / 256 = 0.2500" in out and "formula at 8 bits" in out and "measured = formula x 32/8" in out


@pytest.mark.parametrize("cfg", [MLA, GQA], ids=["mla", "gqa"])
def test_decoding_past_the_cache_is_a_one_line_error(cfg):
    model = DecoderLM(cfg)
    cache, token_B1 = init_cache(model, 1, 4), jnp.zeros((1, 1), jnp.int32)
    with pytest.raises(ValueError, match="raise max_len in init_cache") as e:
        decode_tokens(model, {}, cache, token_B1, steps=5)
    assert "\n" not in str(e.value) and "5 decode steps" in str(e.value)
    with pytest.raises(ValueError, match="raise max_len in init_cache"):
        prefill(model, {}, cache, jnp.zeros((1, 5), jnp.int32))


def test_attention_report_post_hook(tmp_path, monkeypatch):
    from edge_jax.papers.plm.bench import _init
    small = dict(n_layers=1)
    cfgs = {"mla": dataclasses.replace(MLA, **small), "gqa": dataclasses.replace(GQA, **small)}
    for cell in ("mla", "gqa"):
        (tmp_path / cell).mkdir()

    def fake_restore(workdir):
        cfg = cfgs[workdir.rsplit("/", 1)[-1]]
        model = DecoderLM(cfg)
        return types.SimpleNamespace(model=model), types.SimpleNamespace(params=_init(model, 0)), 7

    monkeypatch.setattr("edge_jax.train.evaluate.restore_latest", fake_restore)
    records = [{"cell": "gqa", "seed": 0, "workdir": str(tmp_path / "gqa")},
               {"cell": "mla", "seed": 1, "workdir": str(tmp_path / "nope")},
               {"cell": "mla", "seed": 0, "workdir": str(tmp_path / "mla")},
               {"cell": "mha", "seed": 0, "workdir": str(tmp_path / "missing")}]
    paths = K.attention_report(records, tmp_path / "out", contexts=(12,), steps=4, rounds=1,
                               order=["mla", "gqa", "mha"])
    assert [p.name for p in paths] == ["decode.md", "decode.png"] and all(p.is_file() for p in paths)
    md = paths[0].read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| mla (naive)", "| mla (absorbed)", "| gqa"]
    assert "| 16 | 64 |" in rows[0] and "| 32 | 128 |" in rows[2]  # elements/layer, bytes/token (f32, 1 layer)
    assert "(1.00)" in rows[0] and "86.19" in md and "ratio 1.27" in md and "ratio 1.36" in md
    assert "mha: workdir" in md and "missing; skipped" in md
    with pytest.raises(ValueError, match="exceed"):
        K.attention_report(records[:1], tmp_path / "out", contexts=(4,), steps=4)
