"""Optional dependencies (edge_jax.utils.extras): every module of ``edge_jax`` imports with each extra's
packages hidden, and every feature that needs one refuses in one line that names the extra.

Each extra runs in a fresh interpreter (:data:`CHILD`) whose ``sys.modules`` holds ``None`` for the extra's
packages before anything is imported: ``import torch`` then fails as if torch were not installed, and
``importlib.util.find_spec`` answers None (or raises for a dotted name, as it does when the parent is
missing). The child imports every module, then runs each feature of :data:`FEATURES` that needs a hidden
package through ``edge_jax.cli.main`` and reports its exit status and stderr. An import of an extra's
package made unconditional (at module level), or a feature that imports one without first calling
``edge_jax.utils.extras.require``, fails here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from edge_jax.utils import extras

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (feature, the packages it needs in the order it checks them, its command; {tmp} is a scratch directory)
FEATURES = [
    ("compile for an NVIDIA card", ["jax_plugins"],
     ["compile", "--config", "configs/lm.py:size=tiny", "--topology", "h100"]),
    ("compile for a TPU slice", ["libtpu"],
     ["compile", "--config", "configs/lm.py:size=tiny", "--topology", "v5e-8"]),
    ("bench eval", ["torch", "transformers", "lm_eval", "accelerate"], ["bench", "eval"]),
    ("training on a gs:// corpus", ["gcsfs"],
     ["train", "--config", "configs/lm.py:size=tiny", "--workdir", "{tmp}/gs",
      "--config.data.name=parquet:gs://edge-jax-no-bucket/corpus/*.parquet"]),
    ("hf import --check", ["torch", "transformers"], ["hf", "import", "{tmp}/hf_ckpt", "--workdir", "{tmp}/hf_w",
                                                       "--check"]),
]

CHILD = r"""
import contextlib, importlib, io, json, pathlib, sys, traceback
hidden, features, tmp = json.loads(sys.argv[1])
for name in hidden:
    sys.modules[name] = None  # as if not installed: import raises ModuleNotFoundError, find_spec gives None
failed = {}
for path in sorted(pathlib.Path("edge_jax").rglob("*.py")):
    parts = list(path.with_suffix("").parts)
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    try:
        importlib.import_module(name)
    except BaseException as e:
        failed[name] = f"{type(e).__name__}: {e}"
from edge_jax import cli
from edge_jax.errors import UserError
from edge_jax.utils.extras import installed
ran = []
for feature, needs, argv in features:
    argv = [a.replace("{tmp}", tmp) for a in argv]
    err, status = io.StringIO(), None
    with contextlib.redirect_stderr(err):
        try:
            if argv[0].startswith("python:"):  # a library call: its UserError is what the CLI prints
                module, _, fn = argv[0][len("python:"):].rpartition(".")
                try:
                    getattr(importlib.import_module(module), fn)(*argv[1:])
                    status = 0
                except UserError as e:
                    print(f"edge-jax: error: {e}", file=sys.stderr)
                    status = 2
            else:
                status = cli.main(argv)
        except BaseException as e:
            traceback.print_exc()
            status = f"raised {type(e).__name__}: {e}"
    missing = next((p for p in needs if not installed(p)), None)
    ran.append({"feature": feature, "missing": missing, "status": status, "stderr": err.getvalue()})
print(json.dumps({"failed": failed, "ran": ran}))
"""

def run_child(hidden: list[str], features: list, tmp) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "EDGE_JAX_DATA": str(tmp / "data")}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([hidden, features, str(tmp)])], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scratch(tmp):
    """The files the features read: a checkpoint directory with a usable config.json (so that a refusal that
    comes late still meets the missing package, not a bad config) and a weights file never opened."""
    (tmp / "hf_ckpt").mkdir()
    (tmp / "hf_ckpt" / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": False}))
    (tmp / "hf_ckpt" / "model.safetensors").write_bytes(b"not read")  # refused before it is opened


EXTRAS = sorted(set(extras.PACKAGES.values()))


@pytest.mark.subprocess
@pytest.mark.parametrize("extra", EXTRAS)
def test_every_module_imports_and_every_feature_refuses_in_one_line_without_an_extra(extra, tmp_path):
    hidden = sorted(p for p, e in extras.PACKAGES.items() if e == extra)
    features = [f for f in FEATURES if set(f[1]) & set(hidden)]
    scratch(tmp_path)
    out = run_child(hidden, features, tmp_path)
    failed = sorted(out["failed"].items())
    assert not failed, (f"{len(failed)} modules do not import without the {extra} extra (an unguarded import, or "
                        f"a module importing one that has it), e.g. {failed[:3]}")
    assert len(out["ran"]) == len(features)
    for r in out["ran"]:
        want = extras.PACKAGES[r["missing"]]
        lines = r["stderr"].strip().splitlines()
        errors = [line for line in lines if line.startswith("edge-jax: error:")]
        assert r["status"] == 2 and "Traceback" not in r["stderr"] and len(errors) == 1 and lines[-1] == errors[0], (
            f"{r['feature']} without {r['missing']}: status {r['status']}, stderr:\n{r['stderr'][-3000:]}")
        assert f"needs the {want} extra ({r['missing']}" in errors[0] and f"pip install -e '.[{want}]'" in errors[0], (
            errors[0])


def test_features_cover_every_extra():
    """Each extra has a feature above that refuses without it, and each feature names packages of PACKAGES."""
    needed = {p for _, needs, _ in FEATURES for p in needs}
    assert needed <= set(extras.PACKAGES)
    assert {extras.PACKAGES[p] for p in needed} == set(EXTRAS)


def test_installed_answers_without_raising_for_a_missing_parent(monkeypatch):
    """``find_spec("a.b")`` imports ``a`` and raises when it is missing: the crash of every command on a
    machine without the CUDA plugin, which has no ``jax_plugins`` package at all."""
    with pytest.raises(ModuleNotFoundError):
        importlib.util.find_spec("edge_jax_no_such_package.sub")
    assert extras.installed("edge_jax_no_such_package.sub") is False
    for name in [m for m in sys.modules if m == "jax_plugins" or m.startswith("jax_plugins.")] + ["jax_plugins"]:
        monkeypatch.setitem(sys.modules, name, None)
    assert extras.installed("jax_plugins.xla_cuda12") is False
    assert extras.installed("json") is True and extras.installed("edge_jax.utils.extras") is True


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(extras.MissingExtra, match=r"^reading ckpt needs the interop extra \(safetensors is not "
                       r"installed\): pip install -e '\.\[interop\]'$"):
        extras.require("safetensors", "reading ckpt")
    extras.require("json", "anything")  # installed: no refusal
