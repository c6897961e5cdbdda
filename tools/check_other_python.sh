#!/usr/bin/env bash
# The unit tests under other CPython minor versions than the one CI's `pip`/`pytest` use: the
# oldest that pyproject allows (3.9, else 3.10) and the newest (3.13, else 3.12), each found on
# PATH or among pyenv's versions and differing from $PYTHON's, in a fresh virtual environment
# with a scratch copy of the tracked sources installed as the README installs it
# (`pip install ".[test]"`; about 1.5 minutes each).  The C API changes between minor versions:
# 3.12 made PyErr_Format reject %g (which 3.11 printed as letters), and Py_NewRef and
# PyModule_AddObjectRef only came with 3.10 (the core did not load on 3.9).  A version not
# found is skipped with a note.  Extra arguments go to pytest.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
main=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYENV_VERSIONS=${PYENV_ROOT:-$HOME/.pyenv}/versions

# the first of the given minor versions that runs here with venv and differs from $main
pick() {
    for v in "$@"; do
        for cand in "python$v" "$PYENV_VERSIONS"/"$v".*/bin/python3; do
            if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import venv, ensurepip' 2>/dev/null; then
                local got
                got=$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
                if [[ "$got" == "$v" && "$got" != "$main" ]]; then echo "$cand"; return; fi
            fi
        done
    done
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vortonpy-otherpy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
git -C "$REPO" ls-files -z | (cd "$REPO" && tar --null -T - -cf -) | (mkdir -p "$WORK/src" && tar -xf - -C "$WORK/src")
ran=""
for which in "3.9 3.10" "3.13 3.12"; do
    # shellcheck disable=SC2086
    py=$(pick $which)
    if [[ -z "$py" ]]; then
        echo "check_other_python.sh: none of Python $which besides $main here; skipped" >&2
        continue
    fi
    [[ " $ran " == *" $py "* ]] && continue
    ran="$ran $py"
    echo "check_other_python.sh: $("$py" --version)" >&2
    rm -rf "$WORK/venv"
    "$py" -m venv "$WORK/venv"
    (cd "$WORK/src" && "$WORK/venv/bin/pip" install -q --disable-pip-version-check ".[test]" &&
        "$WORK/venv/bin/pytest" -q -p no:cacheprovider tests "$@")
done
