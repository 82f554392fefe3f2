#!/usr/bin/env bash
# Everything the lent GPU should check, in one device call of under 8 minutes (docs/kernels.md, "Running
# the GPU checks"): the GPU-relevant tests, `edge-jax bench kernels` and a real train step. Each step's
# log goes to $OUT/<step>.log and its exit status to $OUT/summary.txt; the script exits 1 when a step
# failed or was left out for lack of time.
#
# On the device (../shared/device/README.md: carry .whl and .device; this script sources
# .device/on-device.sh itself):
#   bash scripts/gpu_check.sh
# Here, to check the script itself on the CPU with a small selection:
#   GPU_CHECK_PLATFORMS=cpu GPU_CHECK_TESTS=tests/layers/kernels/test_backend.py GPU_CHECK_TRAIN_STEPS=2 \
#     bash scripts/gpu_check.sh
#
# Environment: OUT (default ./gpu_check_out); GPU_CHECK_PLATFORMS (JAX_PLATFORMS, default cuda);
# GPU_CHECK_TESTS (pytest paths or ids: one test step in place of the three default ones);
# GPU_CHECK_BUDGET_S (default 450: every step together; the device call's timeout adds the setup);
# GPU_CHECK_TRAIN_STEPS (steps per timed round of `bench train-step`, default 20; a CPU wants fewer).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-./gpu_check_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
if [[ -f .device/on-device.sh ]]; then  # the device: carried wheels, the project on PYTHONPATH
    . ./.device/on-device.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
    PY=python3
else
    PY=${PYTHON:-.venv/bin/python}
fi
# `edge-jax` as on-device.sh defines it, but runnable under `timeout` (which cannot run a shell function)
EDGE_JAX=("$PY" -c 'import sys; from edge_jax.cli import main; sys.exit(main())')
export JAX_PLATFORMS=${GPU_CHECK_PLATFORMS:-cuda}
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the test steps run side by side on one GPU
export EDGE_JAX_DATA=${EDGE_JAX_DATA:-$(mktemp -d)}
BUDGET=${GPU_CHECK_BUDGET_S:-450}
START=$(date +%s)
STEPS=()

# step NAME LIMIT_S COMMAND...: run COMMAND under `timeout` (LIMIT_S or the time left, the smaller), the
# command and its output in $OUT/NAME.log, its exit status and seconds in $OUT/NAME.rc (124: timed out;
# "skipped" when fewer than 20 s are left)
step() {
    local name=$1 limit=$2 t begin rc
    shift 2
    t=$(( BUDGET - ($(date +%s) - START) ))
    (( t > limit )) && t=$limit
    if (( t < 20 )); then
        echo "skipped 0" > "$OUT/$name.rc"
        return
    fi
    begin=$(date +%s)
    echo "\$ timeout $t $*" > "$OUT/$name.log"
    timeout -k 10 "$t" "$@" >> "$OUT/$name.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - begin ))" > "$OUT/$name.rc"
}

{ "$PY" - <<'PY'
import jax
print("jax", jax.__version__, "backend", jax.default_backend(), "devices", jax.devices())
PY
} > "$OUT/backend.log" 2>&1
echo "$? 0" > "$OUT/backend.rc"
STEPS+=(backend)
[[ $JAX_PLATFORMS == cuda* ]] && ! grep -q "backend gpu" "$OUT/backend.log" && echo "1 0" > "$OUT/backend.rc"

# 1. tests, side by side (compiling is CPU-bound, 16 cores): the kernels and their model tests (the gpu-marked
# cuDNN and bench tests among them), then models and inference. Not here: the slow tests, and the compile
# tests for a TPU or for CUDA without a GPU (CI runs those).
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -m "not slow and not tpu_compile and not gpu_compile" --durations=15)
if [[ -n ${GPU_CHECK_TESTS:-} ]]; then
    read -r -a selection <<< "$GPU_CHECK_TESTS"
    TESTS=(tests)
    step tests 330 "${PYTEST[@]}" --junitxml="$OUT/tests.xml" "${selection[@]}" &
else
    TESTS=(tests-kernels tests-models tests-infer)
    step tests-kernels 330 "${PYTEST[@]}" --junitxml="$OUT/tests-kernels.xml" tests/layers/kernels \
        tests/layers/test_moe.py tests/bench/test_kernels_bench.py &
    step tests-models 330 "${PYTEST[@]}" --junitxml="$OUT/tests-models.xml" tests/models &
    step tests-infer 330 "${PYTEST[@]}" --junitxml="$OUT/tests-infer.xml" tests/infer &
fi
wait
STEPS+=("${TESTS[@]}")

# 2. benchmarks, one at a time on a quiet GPU: every kernel against XLA (the JSON is what
# results/kernels_gpu/bench.json keeps), each row within its tolerance and, on a GPU, timed; then the
# jitted train step against a minimal one
step bench-kernels 150 "${EDGE_JAX[@]}" bench kernels --json "$OUT/kernels.json"
step bench-kernels-agree 20 "$PY" -c '
import json, os, sys
rows = json.load(open(sys.argv[1]))["result"]
bad = [r["kernel"] + " " + r["case"] for r in rows if not r["ok"]]
on_gpu = os.environ["JAX_PLATFORMS"].startswith("cuda")
untimed = [r["kernel"] for r in rows if on_gpu and "kernel_ms" not in r]
print(len(rows), "rows;", "disagree:", bad or "none", "; not timed:", untimed or "none")
sys.exit(1 if bad or untimed or not rows else 0)' "$OUT/kernels.json"
step bench-train-step 60 "${EDGE_JAX[@]}" bench train-step --repeats 3 --steps "${GPU_CHECK_TRAIN_STEPS:-20}" \
    --json "$OUT/train-step.json"
STEPS+=(bench-kernels bench-kernels-agree bench-train-step)

failed=0
{
    printf '%-20s %-8s %7s\n' step status seconds
    for name in "${STEPS[@]}"; do
        read -r rc secs < "$OUT/$name.rc"
        case $rc in
            0) status=ok ;;
            124|137) status=timeout; failed=1 ;;
            skipped) status=skipped; failed=1 ;;
            *) status="rc=$rc"; failed=1 ;;
        esac
        printf '%-20s %-8s %7s\n' "$name" "$status" "$secs"
    done
    echo "total $(( $(date +%s) - START )) s; $( ((failed)) && echo 'FAILED: see the step logs' || echo 'all ok')"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
for name in "${STEPS[@]}"; do  # the tail of each failed step, so the device call's output shows why
    read -r rc _ < "$OUT/$name.rc"
    [[ $rc == 0 ]] && continue
    echo "---- $name ($rc): the last lines of $OUT/$name.log"
    tail -n 25 "$OUT/$name.log" 2>/dev/null
done
exit "$failed"
