#!/usr/bin/env bash
# The unit tests under another CPython minor version than the one CI's `pip`/`pytest` use: the
# newest of python3.13 / python3.12 on PATH (or among pyenv's versions) that differs from
# $PYTHON's version, in a fresh virtual environment, installed from a scratch copy of the
# tracked sources as the README installs it (`pip install ".[test]"`; about 1.5 minutes).  The C API changes between
# minor versions (3.12 made PyErr_Format reject %g, which 3.11 printed as letters), so one
# other version catches what the main run cannot.  Skips with a note when none is found.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
main=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
other=""
PYENV_VERSIONS=${PYENV_ROOT:-$HOME/.pyenv}/versions
for cand in python3.13 python3.12 "$PYENV_VERSIONS"/3.13*/bin/python3 "$PYENV_VERSIONS"/3.12*/bin/python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import venv, ensurepip' 2>/dev/null; then
        v=$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        if [[ "$v" != "$main" ]]; then other=$cand; break; fi
    fi
done
if [[ -z "$other" ]]; then
    echo "check_other_python.sh: no python3.13 or python3.12 besides $main here; skipped" >&2
    exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vortonpy-otherpy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "check_other_python.sh: $($other --version) in $WORK" >&2
git -C "$REPO" ls-files -z | (cd "$REPO" && tar --null -T - -cf -) | (mkdir -p "$WORK/src" && tar -xf - -C "$WORK/src")
"$other" -m venv "$WORK/venv"
cd "$WORK/src"
"$WORK/venv/bin/pip" install -q --disable-pip-version-check ".[test]"
"$WORK/venv/bin/pytest" -q -p no:cacheprovider tests
