#!/usr/bin/env bash
# Builds tensortools' C++ with AddressSanitizer and UndefinedBehaviorSanitizer and runs the
# tests that exercise it under them. The build is a JIT build of its own
# (tensortools_sanitize_C in torch's extension cache); tensortools._C is left alone.
#
#   bash scripts/sanitize.sh [pytest args...]     (docs/sanitizers.md)
#
# Exits non-zero when the build fails, a test fails or a sanitizer reports anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "[sanitize] $*" >&2; }

# The same Python as scripts/run.sh: $TENSORTOOLS_PYTHON, else ./.venv, else python3.
PY="${TENSORTOOLS_PYTHON:-}"
[[ -z "$PY" && -x .venv/bin/python ]] && PY=.venv/bin/python
PY="${PY:-python3}"
# ninja, next to the interpreter, must be on PATH for the build.
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH
export MAX_JOBS="${MAX_JOBS:-2}"

export TENSORTOOLS_JIT=1 TENSORTOOLS_SANITIZE=address,undefined

# The runtimes of the compiler torch builds extensions with. Python itself is not
# instrumented, so ASan's runtime must be loaded before anything else (it replaces malloc
# and friends) or the extension refuses to load; UBSan's comes along.
CXX_BIN="${CXX:-c++}"
runtimes=()
for lib in libasan.so libubsan.so; do
  path=$("$CXX_BIN" -print-file-name="$lib")
  [[ -e "$path" ]] || { log "$CXX_BIN has no $lib (install its sanitizer runtimes)"; exit 1; }
  runtimes+=("$path")
done
PRELOAD="$(IFS=:; echo "${runtimes[*]}")"

# detect_leaks=0: CPython and torch keep much of what they allocate until the process
# ends and never free it (interned objects, operator registries, thread pools), so
# LeakSanitizer would report thousands of blocks at exit that are nobody's bug.
# Everything else is ASan's default: stop at the first error with exit code 1.
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# The build already makes undefined behaviour fatal (-fno-sanitize-recover=undefined);
# halt_on_error covers any check that still recovers, print_stacktrace says where.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# Python objects from malloc rather than pymalloc's arenas, so ASan sees a use after free
# or an overflow of an object the C dispatch path (csrc/python/) gets wrong.
export PYTHONMALLOC=malloc

# The build, timed apart from the tests. The compiler and linker it starts need no
# sanitizer runtime: LD_PRELOAD is dropped for them once this process has it.
start=$SECONDS
LD_PRELOAD="$PRELOAD" "$PY" -c '
import os
os.environ.pop("LD_PRELOAD")
import tensortools
print("[sanitize] built and loaded", tensortools._C.__file__)
'
log "build: $((SECONDS - start)) s"

# The tests that reach the C++: every operator's kernels (their torch.compile tests
# included, which pass under ASan as they are), ScalarTensor's kernels and the wrapper
# types' C dispatch path (csrc/python/), for each wrapper type. tests/test_build.py compiles extensions itself: not here.
tests=(tests/test_ops_lltm.py tests/test_ops_lltm_sequence.py tests/test_ops_axpby.py tests/test_ops_conv_bn2d.py
       tests/test_ops_graph_conv.py tests/test_ops_scalar_ops.py tests/test_metadata_tensor.py
       tests/test_logging_tensor.py tests/test_dispatch.py tests/test_wrapper_paths.py
       tests/test_hostile_dispatch.py tests/test_modes.py tests/test_scalar_fast_path.py
       tests/test_scalar_package.py tests/test_metadata_batch.py)
[[ -e tests/test_ops_fuzz.py ]] && tests+=(tests/test_ops_fuzz.py)

# A report aborts the process it happens in, but one in a child process (inductor's
# compile workers) would only fail a test, or nothing: the log is searched as well.
logfile=$(mktemp)
trap 'rm -f "$logfile"' EXIT
start=$SECONDS
status=0
# --capture=sys: pytest captures Python's output only, so a report (written to file
# descriptor 2 by the runtime, just before it ends the process) is not lost with the
# captured output of the test it ended.
LD_PRELOAD="$PRELOAD" "$PY" -m pytest -p no:cacheprovider --capture=sys -q "${tests[@]}" "$@" 2>&1 \
  | tee "$logfile" || status=$?
log "tests: $((SECONDS - start)) s (pytest exit $status)"
if grep -Eq "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|UndefinedBehaviorSanitizer" \
    "$logfile"; then
  log "sanitizer report(s) above"
  status=1
fi
exit $status
