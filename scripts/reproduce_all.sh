#!/usr/bin/env bash
# Run every ablation grid at a preset (default tiny), write results/<name>/ tables and, at tiny, the docs'
# generated blocks (edge-jax docs).
# Usage: bash scripts/reproduce_all.sh [tiny|paper] [seeds]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-tiny}
seeds=${2:-3}
bash scripts/setup.sh
status=0
for ablation in ablations/*.py; do
  if ! .venv/bin/edge-jax grid "$ablation" --preset "$preset" --list > /dev/null 2>&1; then
    echo "== $ablation: no preset $preset, skipped"
    continue
  fi
  echo "== $ablation ($preset, $seeds seeds)"
  .venv/bin/edge-jax grid "$ablation" --preset "$preset" --seeds "$seeds" || status=1
done
# The README's and docs' generated blocks, from the new records (the tiny preset's are the committed ones).
if [ "$preset" = tiny ]; then
  .venv/bin/edge-jax docs || status=1
fi
exit $status
