#!/usr/bin/env bash
# Check the Hopper output under Triton 3.6 (the version of the GPU machines): every fixture's sm90 variant must
# compile there too, not only under Triton 3.9 (the test suite's version).
#
# Creates a virtual environment with triton==3.6.0, torch==2.13.0 and this package (or reuses the one at $VENV36),
# then runs `transpile verify FIXTURE --target sm90 --values-file fixtures/verify.json` for every fixture: each
# kernel, each autotune config, compiled for sm90 on the CPU.
#
#   bash scripts/check_triton36.sh                      # venv in ~/.cache/triton-transpile/venv-triton36
#   VENV36=/path/to/venv bash scripts/check_triton36.sh  # reuse (and complete) an existing venv
#
# Exit 0 when every fixture compiles, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

VENV36=${VENV36:-${XDG_CACHE_HOME:-$HOME/.cache}/triton-transpile/venv-triton36}
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV36/bin/python" ]; then
    echo "creating $VENV36"
    mkdir -p "$(dirname "$VENV36")"
    "$PYTHON" -m venv "$VENV36"
fi
py="$VENV36/bin/python"

installed() {  # the requirement is met: "triton==3.6.0" -> is that version importable?
    "$py" - "$1" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
name, wanted = sys.argv[1].split("==")
sys.exit(0 if version(name).split("+")[0] == wanted else 1)
PY
}
for requirement in "triton==3.6.0" "torch==2.13.0"; do
    installed "$requirement" || "$py" -m pip install -q "$requirement"
done
# This checkout, editable; triton stays at 3.6.0.
if ! "$py" -c "import sys, transpile.cli.app, transpile; sys.exit(transpile.__file__ != sys.argv[1])" \
        "$repo/transpile/__init__.py" 2>/dev/null; then
    "$py" -m pip install -q -e "$repo" "triton==3.6.0"
fi
triton_version=$("$py" -c "import triton; print(triton.__version__)")
if [ "$triton_version" != "3.6.0" ]; then
    echo "error: $VENV36 has triton $triton_version, not 3.6.0" >&2
    exit 1
fi

echo "Triton $triton_version ($VENV36): transpile verify --target sm90, every fixture"
passed=0
failed=()
for fixture in fixtures/*.py; do
    if "$py" -m transpile verify "$fixture" --target sm90 --values-file fixtures/verify.json; then
        passed=$((passed + 1))
    else
        failed+=("$fixture")
    fi
done
total=$((passed + ${#failed[@]}))
echo "sm90 under Triton $triton_version: $passed of $total fixtures compile"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'failed: %s\n' "${failed[@]}"
    exit 1
fi
