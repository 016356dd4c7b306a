#!/usr/bin/env bash
# The user's path, proved: run the README's install commands (the bash blocks whose first
# line is "# the clean room runs: NAME"), as written, outside the checkout. Build the wheel
# from a copy of the checkout (nothing is written into the checkout), install torch and
# then the wheel into a new virtual environment, install a small project of the user's
# own that depends on tensortools, and from a folder outside the checkout import every
# runtime module, smoke-test each type and operator against the plain-PyTorch maths with
# every development tool blocked (tests/_support/first_contact.py) and run the demo.
# Fails if any of that needs a development tool, or pulls in anything but torch.
#
#   bash scripts/clean_room.sh [PYTHON]
#
# PYTHON builds the wheel (it needs torch and the build tools; default: the test job's);
# with TENSORTOOLS_PREBUILT=PATH (as `scripts/run.sh test` runs it) the wheel packages that
# build of tensortools._C instead of compiling it again (setup.py);
# the new environment is made from `python3`, which needs no torch: the README's block
# installs the torch the wheel requires, never an open range. `bash scripts/run.sh test`
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
# readme_block NAME: the README's bash block that starts with "# the clean room runs: NAME".
readme_block() {
  "$BASE" - "$ROOT/README.md" "$1" <<'PY'
import re, sys
blocks = re.findall(r"```bash\n(.*?)```", open(sys.argv[1]).read(), re.S)
found = [b for b in blocks if b.startswith(f"# the clean room runs: {sys.argv[2]}\n")]
if len(found) != 1:
    sys.exit(f"README.md: {len(found)} blocks for '# the clean room runs: {sys.argv[2]}'")
print(found[0])
PY
}
# run_block NAME BINDIR: run that block with BINDIR's `python` first on PATH.
run_block() {
  local code
  code=$(readme_block "$1")
  log "README, '$1': $(grep -v '^#' <<<"$code" | head -n 1)"
  (cd "$room" && PATH="$2:$PATH" PIP_QUIET=1 bash -euo pipefail -c "$code") >&2
}
export TENSORTOOLS_SRC="$room/src" TENSORTOOLS_DIST="$room/dist"

# `python` in the blocks that build is $PY (a script, not a link: a link to a venv's
# interpreter would not find that venv).
mkdir "$room/build-bin"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$PY" >"$room/build-bin/python"
chmod +x "$room/build-bin/python"
if [[ -n "${TENSORTOOLS_PREBUILT:-}" ]]; then
  log "building the wheel around the extension already built ($TENSORTOOLS_PREBUILT)"
else
  log "building the wheel (MAX_JOBS=$MAX_JOBS)"
fi
run_block wheel "$room/build-bin"
wheel=$(ls "$room"/dist/tensortools-*.whl 2>/dev/null | head -n 1)
[[ -n "$wheel" ]] || { log "the wheel did not build"; exit 1; }
log "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $((SECONDS - start)) s"

"$BASE" -m venv "$room/venv"
VPY="$room/venv/bin/python"
# The wheel's requirements (torch==X, the torch it was built against): the README's
# install block must install exactly that torch first.
requires=$("$VPY" - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    lines = whl.read(meta).decode().splitlines()
reqs = [l.split(":", 1)[1].strip() for l in lines if l.startswith("Requires-Dist:")]
print(" ".join(r.replace(" ", "") for r in reqs if "extra ==" not in r))
PY
)
case "$requires" in
  *"torch=="*) ;;
  *) log "the wheel must require one torch version, not '$requires'"; exit 1 ;;
esac
for block in install project; do
  grep -qF "$requires" <<<"$(readme_block "$block")" || {
    log "README's '$block' block must install $requires, the torch this wheel requires"
    exit 1
  }
done
run_block install "$room/venv/bin"
run_block project "$room/venv/bin"
extra=$("$VPY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(pytest|hypothesis|expecttest|sybil|sphinx|monai|matplotlib|tqdm|ruff|ninja)==' || true)
[[ -z "$extra" ]] || { log "a development tool came with the runtime: $extra"; exit 1; }

mkdir "$room/elsewhere"
cd "$room/elsewhere"
log "first contact (tests/_support/first_contact.py) and the demo, from $PWD"
"$VPY" -c 'import my_project, tensortools; print("my_project imports tensortools", tensortools.__version__)' >&2
"$VPY" "$ROOT/tests/_support/first_contact.py"
"$VPY" -m tensortools.demo --quick >"$room/demo.log" 2>&1 || {
  tail -n 40 "$room/demo.log" >&2
  log "the demo failed"
  exit 1
}
log "passed in $((SECONDS - start)) s"
