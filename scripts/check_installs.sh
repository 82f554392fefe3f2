#!/usr/bin/env bash
# The minimal installs users make (README, "Installing"), checked in a fresh virtual environment: no extras,
# then `test`, then `test,tpu`, each added to the one environment in turn (pip only adds packages, so each
# stage holds what a fresh install of that set holds, and the core is installed once). In each stage:
# `edge-jax --help`, a 5-step training run of the tiny preset, and with pytest the layering test, the
# hidden-extras test, HF import and export (tests/hf/test_import_core.py) and every test marked
# `needs_extra` (the whole suite is collected, so every test module must import without the missing
# extras): those that need an extra this stage lacks skip with their reason, the rest run. Used by .ci/run; takes a few minutes.
#   bash scripts/check_installs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
VENV=$WORK/venv
export EDGE_JAX_DATA="${EDGE_JAX_DATA:-$WORK/data}"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
for extras in "" "test" "test,tpu"; do
  t0=$SECONDS
  spec=".${extras:+[$extras]}"
  echo "== pip install -e '$spec'"
  "$VENV/bin/python" -m pip install --quiet -e "$spec"
  "$VENV/bin/edge-jax" --help > /dev/null
  "$VENV/bin/edge-jax" train --config configs/lm.py:size=tiny --workdir "$WORK/train-${extras:-core}" \
    --config.train.steps=5 --config.train.warmup_steps=1 2>&1 | tail -n 1
  if [[ ",$extras," == *",test,"* ]]; then
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_layering.py tests/utils/test_extras.py \
      tests/hf/test_import_core.py  # HF import and export need nothing of the interop extra
    "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider -n 2 -m 'needs_extra and not slow' tests
  fi
  echo "== '$spec': passed in $((SECONDS - t0)) s"
done
rm -rf "$WORK"
