#!/usr/bin/env bash
# One entry point that sets up everything on a fresh machine and then runs a job.
#
#   bash scripts/run.sh demo [args]   set up, build, run the demo (python -m tensortools.demo)
#   bash scripts/run.sh test [args]   set up, build, run the whole test suite (pytest); with
#                                     --full, every sweep at full size
#   bash scripts/run.sh bench [args]  set up, build, run the benchmarks (python -m tensortools.bench)
#   bash scripts/run.sh setup         set up and build only
#
# Which Python: $TENSORTOOLS_PYTHON if set; else ./.venv if it exists; else python3 itself
# when it already has torch (a machine with its own torch, such as the GPU machine, where
# nothing can be downloaded); else a new ./.venv into which torch==2.13.0 is installed.
# Every step is skipped when already done, so running it again is cheap.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export MAX_JOBS="${MAX_JOBS:-2}"
TORCH_PIN="torch==2.13.0"

log() { echo "[tensortools] $*" >&2; }

pick_python() {
  if [[ -n "${TENSORTOOLS_PYTHON:-}" ]]; then
    PY="$TENSORTOOLS_PYTHON"
  elif [[ -x .venv/bin/python ]]; then
    PY=.venv/bin/python
  elif python3 -c 'import torch' >/dev/null 2>&1; then
    PY=python3
  else
    log "creating .venv"
    python3 -m venv .venv
    PY=.venv/bin/python
  fi
  # Tools installed next to the interpreter (ninja) must be on PATH for the build.
  PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
  export PATH
}

# Pinned specs (from requirements-dev.txt) of those of the given modules that $PY cannot
# import. "wheel" counts only where setuptools is older than 70.1 (newer ones build
# wheels themselves); "setuptools" counts where it is older than 77 (pyproject.toml's
# license expression; the venv of an older Python comes with an older one).
missing() {
  "$PY" - "$@" <<'PY'
import importlib.util, sys
pins = {}
for line in open("requirements-dev.txt"):
    line = line.split("#")[0].strip()
    if line:
        pins[line.split("==")[0]] = line
packages = {"pytest-xdist": "xdist"}  # pinned name -> the module it installs
def needed(mod):
    if mod in ("wheel", "setuptools"):
        try:
            import setuptools
            version = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
            if version >= ((70, 1) if mod == "wheel" else (77, 0)):
                return False
        except Exception:
            pass
        if mod == "setuptools":
            return True
    if mod in packages:  # a module whose package has another name
        return importlib.util.find_spec(packages[mod]) is None
    if "-" in mod:  # a command-line tool (clang-format), installed next to the interpreter
        import os, shutil
        here = os.path.join(os.path.dirname(sys.executable), mod)
        return not (os.path.exists(here) or shutil.which(mod))
    return importlib.util.find_spec(mod) is None
print(" ".join(pins[m] for m in sys.argv[1:] if needed(m)))
PY
}

# install_missing REQUIRED|OPTIONAL MODULE...: pip-install the missing ones. A required one that
# cannot be installed (no network, say) stops the job; an optional one only warns.
# PIP_EXTRA (--no-deps) is added to pip's arguments when set.
install_missing() {
  local kind=$1; shift
  local specs
  specs=$(missing "$@")
  [[ -z "$specs" ]] && return 0
  log "installing $specs"
  # shellcheck disable=SC2086
  if ! "$PY" -m pip install --quiet ${PIP_EXTRA:-} $specs; then
    if [[ "$kind" == required ]]; then
      log "could not install $specs, which this job needs"
      exit 1
    fi
    log "could not install $specs; going on without"
  fi
}

ensure_deps() {
  if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    log "installing $TORCH_PIN (no torch found for $PY)"
    "$PY" -m pip install --quiet "$TORCH_PIN"
  fi
  install_missing required setuptools wheel
  install_missing optional ninja  # without it the build is serial, not broken
  # torch warns at import ("Failed to initialize NumPy") where numpy is missing.
  install_missing optional numpy
  if [[ "$1" == test ]]; then
    install_missing required pytest hypothesis numpy
    # The docs' code examples and API reference are part of the suite, and so are the
    # formatting and lint checks.
    install_missing required sybil sphinx ruff clang-format
    # op_db sweeps need expecttest (they skip without it); tqdm draws progress bars.
    install_missing optional expecttest tqdm
    # pytest-xdist runs the suite on two workers; without it the suite runs on one.
    install_missing optional pytest-xdist
  fi
  if [[ "$1" == test || "$1" == bench ]]; then
    install_missing optional matplotlib  # --plot; its test skips without it
    # MONAI, the peer the MetadataTensor batch rows compare with (pure Python; with
    # --no-deps so that nothing can resolve another torch); its rows skip without it.
    PIP_EXTRA=--no-deps install_missing optional monai
    # The other libraries' tensor types the testing kit runs on (tests/test_testing_peers.py),
    # with what their imports need, alike.
    PIP_EXTRA=--no-deps install_missing optional torch_geometric xxhash psutil \
      tensordict cloudpickle pyvers torchvision
  fi
}

build() {
  local so
  so=$(ls tensortools/_C*.so 2>/dev/null | head -n 1 || true)
  if [[ -n "$so" ]] && [[ -z "$(find csrc setup.py tensortools/_extension.py -newer "$so" -print -quit)" ]] \
      && "$PY" -m pip show --quiet tensortools >/dev/null 2>&1; then
    return 0
  fi
  log "building tensortools._C (MAX_JOBS=$MAX_JOBS)"
  local start=$SECONDS
  "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
  log "built in $((SECONDS - start)) s"
}

job="${1:-}"
[[ $# -gt 0 ]] && shift
case "$job" in
  setup|demo|test|bench) ;;
  *) echo "usage: bash scripts/run.sh {setup|demo|test|bench} [args...]" >&2; exit 2 ;;
esac

pick_python
ensure_deps "$job"
build
case "$job" in
  setup) ;;
  demo) exec "$PY" -m tensortools.demo "$@" ;;
  test)
    start=$SECONDS
    status=0
    # The whole suite (no arguments, or --full alone) starts with the user's path: the
    # wheel in a new environment with torch alone (scripts/clean_room.sh). A failure there
    # fails the job, after the suite has run too.
    if [[ $# -eq 0 || "$*" == "--full" ]] && [[ "${TENSORTOOLS_CLEAN_ROOM:-1}" != 0 ]]; then
      # The clean room packages the extension just built in place (TENSORTOOLS_PREBUILT)
      # instead of compiling it a second time; everything else of the wheel is built anew.
      TENSORTOOLS_PREBUILT="$(ls "$PWD"/tensortools/_C*.so | head -n 1)" TENSORTOOLS_PYTHON="$PY" \
        bash scripts/clean_room.sh || status=$?
      log "clean room took $((SECONDS - start)) s"
    fi
    # The 25 slowest tests are listed at the end of every run, so the suite's time stays
    # visible. --full runs every sweep whole (the default samples them: tests/_support/tiers.py).
    # With pytest-xdist, $TENSORTOOLS_TEST_WORKERS workers (2, the CI machine's cores; one
    # intra-op thread each), each test file on one worker; -n 0 in the arguments runs serially.
    workers=()
    if "$PY" -c 'import xdist' >/dev/null 2>&1 && [[ "${TENSORTOOLS_TEST_WORKERS:-2}" != 0 ]]; then
      workers=(-n "${TENSORTOOLS_TEST_WORKERS:-2}" --dist loadfile)
    fi
    "$PY" -m pytest --durations=25 "${workers[@]}" "$@" || { s=$?; [[ $status -ne 0 ]] || status=$s; }
    log "tests took $((SECONDS - start)) s; a quick subset: bash scripts/run.sh test -m 'not slow'"
    exit "$status"
    ;;
  bench) exec "$PY" -m tensortools.bench "$@" ;;
esac
