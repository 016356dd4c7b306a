#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA build of torch: build tensortools with its
# CUDA kernels, run the whole test suite, the benchmarks and compute-sanitizer over the
# kernels, and write everything to one results folder.
#
#   bash scripts/gpu_check.sh [RESULTS_DIR]      (default: gpu-results/)
#
# Uses python3 (or $TENSORTOOLS_PYTHON) as it is: nothing is downloaded.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu-results}"
PY="${TENSORTOOLS_PYTHON:-python3}"
mkdir -p "$OUT"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
status=0

step() {  # step NAME COMMAND...: run, keep its output in $OUT/NAME.log, remember failures
  local name="$1"; shift
  echo "== $name: $*"
  local start=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - start)) s (log: $OUT/$name.log)"
  tail -n 5 "$OUT/$name.log" | sed 's/^/   | /'
  [ $rc -eq 0 ] || status=1
  return $rc
}

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version 2>&1 | tail -n 1
} | tee "$OUT/machine.txt"

step build "$PY" -m pip install --no-build-isolation --no-deps -e . || { echo "build failed"; exit 1; }
step with-cuda "$PY" -c "import tensortools; assert tensortools.with_cuda, 'built without CUDA'; print('with_cuda', tensortools.with_cuda)"
step tests "$PY" -m pytest -q -rs --junitxml="$OUT/tests.xml" tests
# float32 and bfloat16; draw the JSON anywhere with matplotlib:
#   python -m tensortools.bench.plot RESULTS_DIR/bench.json bench-gpu.png
step bench "$PY" -m tensortools.bench --device cuda --json "$OUT/bench.json" --no-dispatch \
  --no-sequence
# The LLTM over whole sequences (float32; compiling the 128-step loops takes minutes).
step bench-sequence "$PY" -m tensortools.bench --device cuda --dtype float32 --no-lltm \
  --no-conv-bn --no-scalar --no-dispatch --size 16/32/128 --size 64/1024/128 --json "$OUT/sequence.json"
step bandwidth "$PY" -m tensortools.bench.bandwidth
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    step "sanitizer-$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$PY" -m pytest -q -x -p no:cacheprovider -m cuda tests -k "not compile"
  done
else
  echo "compute-sanitizer not found" | tee "$OUT/sanitizer.log"
fi
echo "results in $OUT/ (exit $status)"
exit $status
