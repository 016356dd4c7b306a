#!/usr/bin/env bash
# The user's path, proved: build tensortools' wheel from a copy of the checkout (nothing
# is written into the checkout), install it into a new virtual environment that holds the
# runtime dependency alone (the torch the wheel requires), and from a folder outside the
# checkout import every runtime module, smoke-test each type and operator against the
# plain-PyTorch maths with every development tool blocked (tests/_support/first_contact.py)
# and run the demo. Fails if any of that needs a development tool.
#
#   bash scripts/clean_room.sh [PYTHON]
#
# PYTHON builds the wheel (it needs torch and the build tools; default: the test job's);
# the new environment is made from `python3`, which needs no torch: torch is installed
# there at the version the wheel requires, never an open range. `bash scripts/run.sh test`
# runs this before the suite, so CI does too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PY="${1:-${TENSORTOOLS_PYTHON:-.venv/bin/python}}"
[[ "$PY" == */* ]] && PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
BASE="${TENSORTOOLS_BASE_PYTHON:-python3}"
export MAX_JOBS="${MAX_JOBS:-2}"

log() { echo "[clean room] $*" >&2; }

room=$(mktemp -d)
trap 'rm -rf "$room"' EXIT
start=$SECONDS

# The files a clone has (tracked, and new ones not ignored): no build output, no venv.
mkdir "$room/src"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$room/src"
else
  tar --exclude=.venv --exclude=build --exclude='*.so' -cf - . | tar -xf - -C "$room/src"
fi
log "building the wheel (MAX_JOBS=$MAX_JOBS)"
(cd "$room/src" && "$PY" -m pip wheel -qq --no-build-isolation --no-deps -w "$room/dist" .) >&2
wheel=$(ls "$room"/dist/tensortools-*.whl 2>/dev/null | head -n 1)
[[ -n "$wheel" ]] || { log "the wheel did not build"; exit 1; }
log "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $((SECONDS - start)) s"

"$BASE" -m venv "$room/venv"
VPY="$room/venv/bin/python"
# The wheel's requirements (torch==X, the torch it was built against), as pip installs
# them for a user: nothing else.
requires=$("$VPY" - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    lines = whl.read(meta).decode().splitlines()
reqs = [l.split(":", 1)[1].strip() for l in lines if l.startswith("Requires-Dist:")]
print(" ".join(r for r in reqs if "extra ==" not in r))
PY
)
case "$requires" in
  *"torch=="*) ;;
  *) log "the wheel must require one torch version, not '$requires'"; exit 1 ;;
esac
log "installing $requires and the wheel into a new environment"
# shellcheck disable=SC2086
"$VPY" -m pip install -qq $requires >&2
"$VPY" -m pip install -qq --no-deps "$wheel" >&2
extra=$("$VPY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(pytest|hypothesis|expecttest|sybil|sphinx|monai|matplotlib|tqdm|ruff)==' || true)
[[ -z "$extra" ]] || { log "a development tool came with the runtime: $extra"; exit 1; }

mkdir "$room/elsewhere"
cd "$room/elsewhere"
log "first contact (tests/_support/first_contact.py) and the demo, from $PWD"
"$VPY" "$ROOT/tests/_support/first_contact.py"
"$VPY" -m tensortools.demo --quick >"$room/demo.log" 2>&1 || {
  tail -n 40 "$room/demo.log" >&2
  log "the demo failed"
  exit 1
}
log "passed in $((SECONDS - start)) s"
