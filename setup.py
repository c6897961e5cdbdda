"""Build the C core (vortonpy._core) with OpenMP where the compiler has it.

Environment knobs:
  VORTONPY_NATIVE=1    add -march=native (fastest on the build machine; not portable)
  VORTONPY_NO_OPENMP=1 build single-threaded even if OpenMP is available
  VORTONPY_SANITIZE=1  build with AddressSanitizer + UndefinedBehaviorSanitizer (see README)
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = [
    "csrc/module.c", "csrc/bind_convert.c", "csrc/bind_params.c", "csrc/bind_body.c",
    "csrc/params.c", "csrc/sim.c", "csrc/workspace.c", "csrc/particles.c", "csrc/grid.c",
    # the step's phases (docs/method.md, "One step")
    "csrc/domain.c", "csrc/velocity.c", "csrc/direct.c", "csrc/tree.c", "csrc/poisson.c",
    "csrc/stretch.c", "csrc/ambient.c", "csrc/buoyancy.c", "csrc/diffuse.c", "csrc/advect.c", "csrc/contact.c",
    "csrc/penalize.c",
    "csrc/body.c", "csrc/emit.c", "csrc/remesh.c",
    "csrc/cpu.c",
    # the FFT lines (pocketfft's C++ header, vectorised across lines): the one C++ part
    "csrc/fft_lines.cpp", "csrc/fft_lines_avx2.cpp",
]
CXX_SUFFIXES = (".cpp", ".cc", ".cxx")


def _compiles(compiler, flags, code="int main(void){return 0;}\n", link_flags=()):
    """True if `compiler` compiles and links a tiny program with `flags`."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.c")
        with open(src, "w") as f:
            f.write(code)
        cmd = [compiler, *flags, src, "-o", os.path.join(d, "t"), *link_flags]
        try:
            return subprocess.run(cmd, capture_output=True).returncode == 0
        except OSError:
            return False


class BuildExt(build_ext):
    def build_extensions(self):
        cc = self.compiler.compiler_so[0] if hasattr(self.compiler, "compiler_so") else "cc"
        if shutil.which(cc) is None:
            cc = sysconfig.get_config_var("CC") or "cc"
            cc = cc.split()[0]
        cxx = getattr(self.compiler, "compiler_cxx", None) or ["c++"]
        if shutil.which(cxx[0]) is None:
            sys.exit(f"vortonpy: no C++ compiler ('{cxx[0]}' not found). The FFT layer (csrc/fft_lines.cpp) "
                     "is C++: install one (Debian/Ubuntu: apt install g++, or build-essential; "
                     "macOS: xcode-select --install), or point CXX at it.")
        compile_args = ["-O3", "-fno-math-errno", "-fopenmp-simd", "-Wall", "-Wno-unknown-pragmas"]
        link_args = []
        if os.environ.get("VORTONPY_NATIVE") == "1" and _compiles(cc, ["-march=native"]):
            compile_args.append("-march=native")
        omp_code = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
        if os.environ.get("VORTONPY_NO_OPENMP") != "1" and _compiles(cc, ["-fopenmp"], omp_code, ["-fopenmp"]):
            compile_args.append("-fopenmp")
            link_args.append("-fopenmp")
        else:
            print("vortonpy: OpenMP not found, building single-threaded", file=sys.stderr)
        if os.environ.get("VORTONPY_SANITIZE") == "1":
            san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g", "-O1"]
            compile_args = [a for a in compile_args if not a.startswith("-O")] + san
            link_args += ["-fsanitize=address,undefined"]
        for ext in self.extensions:
            ext.extra_compile_args = compile_args
            ext.extra_link_args = link_args
        # The language standard per file: C11 for the core, C++17 for the FFT lines (whose
        # 32-byte vectors in the baseline copy would otherwise draw ABI notes, -Wno-psabi).
        compile_one = self.compiler._compile

        def _compile(obj, src, ext, cc_args, extra_postargs, pp_opts):
            std = ["-std=c++17", "-Wno-psabi"] if ext in CXX_SUFFIXES else ["-std=gnu11"]
            return compile_one(obj, src, ext, cc_args, list(extra_postargs) + std, pp_opts)

        self.compiler._compile = _compile
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "vortonpy._core",
            sources=SOURCES,
            # the headers too: a change to one alone (grid_inline.h, kernel.h) must rebuild
            depends=sorted(glob.glob(os.path.join("csrc", "*.h")) + glob.glob(os.path.join("csrc", "*.hpp"))
                           + glob.glob(os.path.join("csrc", "pocketfft", "*.h"))),
            include_dirs=["csrc", np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            language="c++",  # link with the C++ compiler (its runtime, for the FFT lines)
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
