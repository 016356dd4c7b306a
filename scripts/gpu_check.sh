#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA build of torch: build tensortools with its
# CUDA kernels, run the tests, the benchmarks and compute-sanitizer over the kernels, and
# write everything to one results folder.
#
#   bash scripts/gpu_check.sh [--quick | --lltm] [--budget SECONDS] [RESULTS_DIR]
#
# RESULTS_DIR defaults to gpu-results/. --quick runs the CUDA tests alone (in parallel
# where pytest-xdist is installed), short benchmarks and the sanitizer over the kernels'
# own tests; --lltm builds as --quick does, then runs the LLTM sequence's CUDA tests, its
# table against nn.LSTM (float32 and bfloat16, persistent kernels beside the per-step
# loop), the character model and the sanitizers over the sequence's kernels; --budget stops each step where the whole run would pass SECONDS, so that a
# lease of a few minutes still returns every log. The logs are also packed into
# RESULTS_DIR/results.tar.gz. Uses python3 (or $TENSORTOOLS_PYTHON) as it is: nothing is
# downloaded.
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=0
LLTM=0
BUDGET=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --lltm) QUICK=1; LLTM=1; shift ;;
    --budget) BUDGET="$2"; shift 2 ;;
    *) break ;;
  esac
done
OUT="${1:-gpu-results}"
PY="${TENSORTOOLS_PYTHON:-python3}"
mkdir -p "$OUT"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export PYTHONUNBUFFERED=1
status=0

step() {  # step NAME CAP COMMAND...: run for at most CAP s (and the budget), log to $OUT/NAME.log
  local name="$1" cap="$2"; shift 2
  if [ "$BUDGET" -gt 0 ]; then
    local left=$((BUDGET - SECONDS))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -lt 10 ]; then
      echo "== $name: skipped (budget spent)"; status=1; return 1
    fi
  fi
  echo "== $name (at most $cap s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$cap" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - start)) s (log: $OUT/$name.log)"
  [ $rc -eq 124 ] && echo "   | stopped at its time limit"
  tail -n 5 "$OUT/$name.log" | sed 's/^/   | /'
  [ $rc -eq 0 ] || status=1
  return $rc
}

pack() {  # every log in one file, for transports that bring back few files
  tar czf /tmp/gpu-results.tar.gz -C "$OUT" --exclude results.tar.gz . && mv /tmp/gpu-results.tar.gz "$OUT/results.tar.gz"
}

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version 2>&1 | tail -n 1
} | tee "$OUT/machine.txt"

FOREVER=100000
if [ $QUICK -eq 1 ]; then
  # The build for this GPU's architecture only, in place (importable from the checkout).
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
    TORCH_CUDA_ARCH_LIST=$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
    export TORCH_CUDA_ARCH_LIST
  fi
  step build 400 "$PY" setup.py build_ext --inplace || { echo "build failed"; status=1; }
else
  step build $FOREVER "$PY" -m pip install --no-build-isolation --no-deps -e . \
    || { echo "build failed"; exit 1; }
fi
step with-cuda 60 "$PY" -c "import tensortools; assert tensortools.with_cuda, 'built without CUDA'; print('with_cuda', tensortools.with_cuda)" \
  || { pack; exit 1; }
if [ $LLTM -eq 1 ]; then
  seq_tests=(tests/test_ops_lltm_sequence_cuda.py tests/test_ops_lltm_sequence.py tests/test_lltm_autocast.py)
  step tests 150 "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda --junitxml="$OUT/tests.xml" \
    "${seq_tests[@]}"
  for tool in memcheck racecheck; do
    step "sanitizer-$tool" 40 compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$PY" -m pytest -q -x -p no:cacheprovider -m cuda tests/test_ops_lltm_sequence_cuda.py \
      -k "float64 and 133"
  done
  step blocks 40 "$PY" scripts/lltm_blocks.py --json "$OUT/blocks.json"
  step char-model 40 "$PY" examples/char_model.py --device cuda --plot "$OUT/char_model.png"
  step recurrent 170 "$PY" -m tensortools.bench --device cuda --recurrent-only \
    --dtype float32 --dtype bfloat16 --min-run-time 0.1 --rounds 2 \
    --size 16/32/128 --size 64/1024/128 --size 32/256/512 --json "$OUT/recurrent.json"
elif [ $QUICK -eq 1 ]; then
  par=()
  "$PY" -c "import xdist" 2>/dev/null && par=(-n 8)
  step tests 200 "$PY" -m pytest -q -rs -p no:cacheprovider "${par[@]}" -m cuda \
    --junitxml="$OUT/tests.xml" tests
  step recurrent 150 "$PY" -m tensortools.bench --device cuda --recurrent-only --dtype float32 \
    --min-run-time 0.1 --rounds 2 --size 16/32/128 --size 64/1024/128 --size 32/256/512 \
    --json "$OUT/recurrent.json"
  step sanitizer-memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$PY" -m pytest -q -x -p no:cacheprovider -m cuda tests/test_ops_axpby.py \
    tests/test_ops_lltm.py tests/test_ops_conv_bn2d.py tests/test_ops_scalar_ops.py \
    -k "not compile and not opcheck"
  step char-model 90 "$PY" examples/char_model.py --device cuda --plot "$OUT/char_model.png"
  step bench 150 "$PY" -m tensortools.bench --device cuda --no-compile --no-dispatch \
    --min-run-time 0.1 --rounds 2 --steps 32 --size 16/32/128 --size 64/1024/128 \
    --size 256/1024/512 --json "$OUT/bench.json"
else
  step tests $FOREVER "$PY" -m pytest -q -rs --junitxml="$OUT/tests.xml" tests
  # float32 and bfloat16; draw the JSON anywhere with matplotlib:
  #   python -m tensortools.bench.plot RESULTS_DIR/bench.json bench-gpu.png
  step bench $FOREVER "$PY" -m tensortools.bench --device cuda --json "$OUT/bench.json" \
    --no-dispatch --no-sequence
  # The LLTM over whole sequences (float32; compiling the 128-step loops takes minutes).
  step bench-sequence $FOREVER "$PY" -m tensortools.bench --device cuda --dtype float32 \
    --no-lltm --no-conv-bn --no-scalar --no-dispatch --size 16/32/128 --size 64/1024/128 \
    --json "$OUT/sequence.json"
  step recurrent $FOREVER "$PY" -m tensortools.bench --device cuda --recurrent-only \
    --size 16/32/128 --size 64/1024/128 --size 32/256/512 --json "$OUT/recurrent.json"
  step char-model $FOREVER "$PY" examples/char_model.py --device cuda --plot "$OUT/char_model.png"
  step bandwidth $FOREVER "$PY" -m tensortools.bench.bandwidth
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      step "sanitizer-$tool" $FOREVER compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$PY" -m pytest -q -x -p no:cacheprovider -m cuda tests -k "not compile"
    done
  else
    echo "compute-sanitizer not found" | tee "$OUT/sanitizer.log"
  fi
fi
pack
echo "results in $OUT/ (exit $status)"
exit $status
