#!/usr/bin/env bash
# Build vortonpy's C core without OpenMP (VORTONPY_NO_OPENMP=1, as on a compiler without it)
# in a scratch copy of the tracked source tree and run the test suite against that build.
# The source tree and any installed vortonpy are not touched.  CI runs this after the
# README's test command (.ci/run); it takes about a minute.
#
#   tools/check_no_openmp.sh                  # the whole suite (tests/)
#   tools/check_no_openmp.sh -k threads       # extra arguments go to pytest
#
# Environment: PYTHON, the interpreter with numpy, pytest and setuptools (default: python3).
# Why: a sim asks for threads whatever the build, and the threaded code paths must then run
# on one thread without waiting for a team that never forms (a crash or a hang there is
# invisible to every test on an OpenMP build).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vortonpy-noomp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# the tracked files (and any uncommitted edits to them), not build outputs
(cd "$REPO" && git ls-files -z | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$WORK"
cd "$WORK"
echo "check_no_openmp.sh: building in $WORK without OpenMP"
# a wheel built by pip in its isolated build environment (as `pip install .` builds; the
# interpreter needs no setuptools of its own), its extension put beside the copied sources
VORTONPY_NO_OPENMP=1 "$PYTHON" -m pip wheel -q --no-deps -w wheel . >build.log 2>&1 || { cat build.log; exit 1; }
"$PYTHON" -m zipfile -e wheel/*.whl unpacked
cp unpacked/vortonpy/_core*.so vortonpy/
"$PYTHON" -c 'import sys, vortonpy; assert vortonpy.__file__.startswith(sys.argv[1]), vortonpy.__file__; assert not vortonpy.has_openmp, "built with OpenMP"; print("check_no_openmp.sh: testing", vortonpy.__file__, "(has_openmp False)")' "$WORK"
"$PYTHON" -m pytest -q -p no:cacheprovider tests "$@"
