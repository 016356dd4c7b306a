#!/usr/bin/env bash
# One entry point that sets up everything on a fresh machine and then runs a job.
#
#   bash scripts/run.sh demo [args]   set up, build, run the demo (python -m tensortools.demo)
#   bash scripts/run.sh test [args]   set up, build, run the whole test suite (pytest)
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

ensure_deps() {
  if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    log "installing $TORCH_PIN (no torch found for $PY)"
    "$PY" -m pip install --quiet "$TORCH_PIN"
  fi
  # Install only what is missing, at the versions pinned in requirements-dev.txt, so a
  # machine that has everything (and maybe no network) installs nothing.
  local missing
  missing=$("$PY" - <<'PY'
import importlib.util
modules = {"setuptools": "setuptools", "wheel": "wheel", "ninja": "ninja",
           "pybind11": "pybind11", "pytest": "pytest", "hypothesis": "hypothesis",
           "numpy": "numpy"}
pins = {}
for line in open("requirements-dev.txt"):
    line = line.split("#")[0].strip()
    if line:
        pins[line.split("==")[0]] = line
print(" ".join(pins[pkg] for mod, pkg in modules.items()
               if importlib.util.find_spec(mod) is None))
PY
)
  if [[ -n "$missing" ]]; then
    log "installing $missing"
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet $missing
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
ensure_deps
build
case "$job" in
  setup) ;;
  demo) exec "$PY" -m tensortools.demo "$@" ;;
  test) exec "$PY" -m pytest "$@" ;;
  bench) exec "$PY" -m tensortools.bench "$@" ;;
esac
