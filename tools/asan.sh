#!/usr/bin/env bash
# Build vortonpy's C core with AddressSanitizer + UndefinedBehaviorSanitizer in a scratch copy
# of the source tree and run the test suite against it.  The source tree itself is not touched
# (its normal, optimised extension keeps working).
#
#   tools/asan.sh                      # whole suite
#   tools/asan.sh tests/test_api.py -k view   # extra arguments go to pytest
#
# Environment:
#   PYTHON             interpreter with numpy, pytest, hypothesis (default: python3)
#   CC                 compiler (default: gcc; clang works too)
#   VORTONPY_ASAN_DIR  where to build (default: a fresh temporary directory, removed afterwards
#                      unless KEEP=1)
#   KEEP=1             keep the build directory
#
# Python itself is not instrumented, so the ASan runtime is preloaded (LD_PRELOAD) and leak
# detection is off (CPython's own allocations at exit are noise).  Any ASan report (heap
# overflow, use after free, ...) or UBSan report (overflow, bad shift, float->int out of
# range, misaligned access, ...) aborts the run with a stack trace and a non-zero exit status.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
CC=${CC:-gcc}
export CC

if [[ -n "${VORTONPY_ASAN_DIR:-}" ]]; then
    WORK=$VORTONPY_ASAN_DIR
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/vortonpy-asan.XXXXXX")
    if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; fi
fi

echo "asan.sh: copying $REPO to $WORK" >&2
if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
    # tracked and untracked-but-not-ignored files: the working tree as it is, minus build output
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | \
        while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done | \
        tar --null -T - -cf -) | tar -xf - -C "$WORK"
else
    cp -r "$REPO"/. "$WORK"/
fi
rm -rf "$WORK"/build "$WORK"/vortonpy/_core*.so

echo "asan.sh: building with VORTONPY_SANITIZE=1 ($CC)" >&2
(cd "$WORK" && VORTONPY_SANITIZE=1 "$PYTHON" setup.py -q build_ext --inplace --force) >"$WORK/build.log" 2>&1 || {
    cat "$WORK/build.log" >&2
    echo "asan.sh: build failed" >&2
    exit 2
}
grep -i "warning" "$WORK/build.log" >&2 || true

LIBASAN=$("$CC" -print-file-name=libasan.so)
if [[ ! -e "$LIBASAN" ]]; then
    echo "asan.sh: $CC has no libasan.so ($LIBASAN); install the compiler's sanitizer runtime (e.g. libasan8)" >&2
    exit 2
fi
# (grep without -q reads all of ldd's output: with -q it can exit first, ldd then dies of
# SIGPIPE, and pipefail reports the pipeline as failed although asan was found)
if ! ldd "$WORK"/vortonpy/_core*.so | grep asan >/dev/null; then
    echo "asan.sh: the extension is not linked against ASan; did setup.py honour VORTONPY_SANITIZE?" >&2
    exit 2
fi

# libstdc++ is preloaded too: a C++ extension (matplotlib's, Pillow's, ...) that throws would
# otherwise hit ASan's __cxa_throw interceptor before libstdc++ is loaded and abort with
# "CHECK failed: asan_interceptors.cpp ... real___cxa_throw".
LIBSTDCXX=$("$CC" -print-file-name=libstdc++.so.6)
[[ -e "$LIBSTDCXX" ]] || LIBSTDCXX=$("$CC" -print-file-name=libstdc++.so)
export LD_PRELOAD="$LIBASAN${LIBSTDCXX:+:$LIBSTDCXX}${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONFAULTHANDLER=1
export VORTONPY_NO_PROGRESS=1 MPLBACKEND=Agg
export VORTONPY_SANITIZED=1   # tests that measure RSS skip themselves (ASan keeps freed memory)

echo "asan.sh: running pytest in $WORK (LD_PRELOAD=$LIBASAN)" >&2
cd "$WORK"
# -p no:cacheprovider: nothing written back; the copy imports its own instrumented _core.
"$PYTHON" - <<'PY'
import vortonpy, os
assert os.path.dirname(vortonpy.__file__).startswith(os.environ["PYTHONPATH"].split(":")[0]), vortonpy.__file__
print("asan.sh: using", vortonpy._core.__file__)
PY
# --capture=sys: pytest captures only Python's sys.stdout/stderr, so a sanitizer report written
# to file descriptor 2 by a process that then halts reaches the terminal instead of being lost.
status=0
"$PYTHON" -m pytest -q -p no:cacheprovider --capture=sys "${@:-tests}" || status=$?
if [[ $status -eq 0 ]]; then echo "asan.sh: no sanitizer errors; tests passed" >&2
else echo "asan.sh: FAILED (status $status; a sanitizer report, if any, is above)" >&2; fi
exit $status
