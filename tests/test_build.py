"""How the C core was built, checked on the built extension itself (no timing)."""
import collections
import platform
import re
import shutil
import subprocess

import pytest

import vortonpy._core as core

_ARITH = re.compile(r"v?(add|sub|mul|div|fn?madd\d+|fn?msub\d+|max|min|sqrt)(ss|sd|ps|pd)$")


def clone_op_counts(path):
    """Per function of the shared object at path, the float arithmetic instructions of its
    disassembly: scalar (ss, sd) and packed (ps, pd) ones."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    counts, fn = collections.defaultdict(collections.Counter), None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:", line)
        if m:
            fn = m.group(1)
            continue
        op = line.split("\t")[-1].strip().split(" ")[0]
        m = _ARITH.match(op)
        if fn and m:
            counts[fn]["scalar" if m.group(2) in ("ss", "sd") else "packed"] += 1
    return counts


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None,
                    reason="the target_clones build exists on x86-64 with GCC; objdump reads it")
def test_avx2_clones_are_vectorised_like_the_avx512_ones():
    """The hot loops carry GCC target_clones (x86-64-v4 = AVX-512, x86-64-v3 = AVX2 + FMA,
    baseline).  A loop that vectorises in the AVX-512 clone can stay scalar in the AVX2 one
    (GCC if-converts float operations on a conditional path only with AVX-512's masks under
    its default -ftrapping-math): the PSE weight loop once did so, 2.6-3x slower on AVX2
    machines, unseen because every timing ran on an AVX-512 one.  Fails when a cloned
    function's AVX2 version has under half the packed float operations of its AVX-512
    version and more scalar ones (a scalar loop where the other is packed)."""
    counts = clone_op_counts(core.__file__)
    bases = sorted({f.split(".arch_x86_64_v3")[0] for f in counts if f.endswith(".arch_x86_64_v3")})
    if not bases:
        pytest.skip("no clone symbols in the extension (built without target_clones: not GCC, or "
                    "VP_NO_CLONES; or its symbol table stripped)")
    assert "pse_task" in bases
    scalar_where_packed = []
    for b in bases:
        v3, v4 = counts[b + ".arch_x86_64_v3"], counts[b + ".arch_x86_64_v4"]
        if v3["packed"] < 0.5 * v4["packed"] and v3["scalar"] > v4["scalar"] + 8:
            scalar_where_packed.append(f"{b}: AVX2 {dict(v3)}, AVX-512 {dict(v4)}")
    assert not scalar_where_packed, scalar_where_packed
