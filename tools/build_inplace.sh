#!/usr/bin/env bash
# Build the extension and put it next to the sources atomically (rename), so processes that
# already loaded the old one (a test run, a notebook) are not corrupted by an in-place copy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY setup.py -q build_ext >/dev/null
so=$(ls build/lib.*/vortonpy/_core*.so | head -1)
cp "$so" "vortonpy/.$(basename "$so").tmp"
mv -f "vortonpy/.$(basename "$so").tmp" "vortonpy/$(basename "$so")"
echo "built $(basename "$so")"
