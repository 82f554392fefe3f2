#!/usr/bin/env bash
# Create .venv (if missing) and install edge-jax with the developer's extras: test, interop, tpu, cuda, lm-eval and
# gcs (README, "Installing"; gpu, for running on NVIDIA cards, is left out). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if [ ! -f .venv/.edge_jax_installed ] || [ pyproject.toml -nt .venv/.edge_jax_installed ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet torch==2.13.0          # the CPU wheel; the interop extra pins it
  python -m pip install --quiet -e '.[test,interop,tpu,cuda,lm-eval,gcs]'
  touch .venv/.edge_jax_installed
fi
