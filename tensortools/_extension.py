"""How the C++/CUDA extension is built: one description for setup.py and the JIT path.

This module imports nothing from tensortools, so setup.py can load it from its path
before the package (and its compiled part) exists.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"

# Compiled only when there are no CUDA kernels: it gives CUDA tensors a clear error.
_CUDA_MISSING = Path("ops") / "cuda_missing.cpp"


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    sources: list[str]  # relative to ROOT
    with_cuda: bool
    define_macros: list[tuple[str, str | None]]
    cxx_flags: list[str]
    nvcc_flags: list[str]
    link_flags: list[str]


def _want_cuda() -> bool:
    """CUDA kernels are built with a CUDA torch and nvcc present, or when FORCE_CUDA=1."""
    if os.environ.get("FORCE_CUDA", "0") == "1":
        return True
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    return torch.version.cuda is not None and CUDA_HOME is not None


def sanitizers() -> str:
    """The -fsanitize= list from TENSORTOOLS_SANITIZE (e.g. "address,undefined"), or ""."""
    return os.environ.get("TENSORTOOLS_SANITIZE", "").strip()


def build_config() -> BuildConfig:
    cpp = sorted(p.relative_to(CSRC) for p in CSRC.rglob("*.cpp"))
    cu = sorted(p.relative_to(CSRC) for p in CSRC.rglob("*.cu"))
    with_cuda = bool(cu) and _want_cuda()
    if with_cuda:
        cpp.remove(_CUDA_MISSING)
    else:
        cu = []
    sources = [str(Path("csrc") / p) for p in cpp + cu]
    debug = os.environ.get("TENSORTOOLS_DEBUG", "0") == "1"
    opt = ["-O0", "-g"] if debug else ["-O3"]
    sanitize = sanitizers()
    # Host C++ only: nvcc takes no -fsanitize (compute-sanitizer checks the CUDA kernels).
    # -O1 keeps sanitized code fast enough for the test suite and its stacks readable; a
    # frame pointer on every frame gives ASan whole stacks; without recovery the first
    # undefined behaviour aborts the process, so a test run cannot pass over it.
    san_flags = (
        [
            f"-fsanitize={sanitize}",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined",
            "-g",
            "-O1",
        ]
        if sanitize
        else []
    )
    return BuildConfig(
        sources=sources,
        with_cuda=with_cuda,
        define_macros=[("WITH_CUDA", None)] if with_cuda else [],
        # at::parallel_for is inlined from ATen's headers and runs on OpenMP; the OpenMP
        # runtime resolves to the libgomp torch already loaded (same soname).
        # No FP traps or errno are relied on; saying so lets the compiler if-convert and
        # vectorise the pointwise loops (results are unchanged).
        # The sanitizer flags come last, so their -O1 wins over -O3.
        cxx_flags=[*opt, "-fopenmp", "-fno-trapping-math", "-fno-math-errno", *san_flags],
        nvcc_flags=opt,
        link_flags=["-fopenmp", *([f"-fsanitize={sanitize}"] if sanitize else [])],
    )


def jit_load(verbose: bool = False) -> ModuleType:
    """Compile the same sources with torch.utils.cpp_extension.load and import them."""
    from torch.utils.cpp_extension import load

    cfg = build_config()
    sanitize = sanitizers()
    print(
        "tensortools: TENSORTOOLS_JIT is set, compiling the C++"
        f"{'/CUDA' if cfg.with_cuda else ''} sources"
        f"{f' with -fsanitize={sanitize}' if sanitize else ''} with "
        "torch.utils.cpp_extension.load (the first import takes a while; later ones reuse "
        "the build)",
        file=sys.stderr,
        flush=True,
    )
    macros = [
        f"-D{name}" if value is None else f"-D{name}={value}" for name, value in cfg.define_macros
    ]
    # torch decides whether to rebuild from the .cpp/.cu files and the flags alone; a
    # digest of every file under csrc/ in the flags makes header edits count too.
    digest = hashlib.sha1()
    for path in sorted(CSRC.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(CSRC)).encode() + b"\0" + path.read_bytes())
    macros.append(f"-DTENSORTOOLS_SOURCES_DIGEST={digest.hexdigest()[:16]}")
    return load(
        # A name of its own gives the sanitized build its own folder in the cache, so
        # switching between the two never rebuilds or replaces the other.
        name="tensortools_sanitize_C" if sanitize else "tensortools_jit_C",
        sources=[str(ROOT / s) for s in cfg.sources],
        extra_cflags=cfg.cxx_flags + macros,
        extra_cuda_cflags=cfg.nvcc_flags + macros,
        extra_ldflags=cfg.link_flags,
        with_cuda=cfg.with_cuda,
        verbose=verbose,
    )


def cuda_sources() -> list[Path]:
    """Every CUDA source under csrc/."""
    return sorted(CSRC.rglob("*.cu"))


def nvcc_check_command(source: Path, output: Path, shim: Path) -> list[str]:
    """An `nvcc -c` of one CUDA source with torch's include paths and the extension's
    nvcc flags, for checking that it compiles where no CUDA build of torch is installed.

    A CPU wheel of torch ships the c10/cuda headers but not the header CMake generates
    next to them (c10/cuda/impl/cuda_cmake_macros.h); a stand-in for it is written
    under `shim`. C++17 is the oldest standard the supported torch versions build with.
    """
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

    generated = shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    generated.parent.mkdir(parents=True, exist_ok=True)
    generated.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{shim}", f"-I{CSRC}"]
    return [
        "nvcc",
        "-c",
        "-std=c++17",
        "-arch=sm_90",
        *COMMON_NVCC_FLAGS,
        # torch's newest headers use C++20 bit-field initialisers; accepted with a warning
        "-diag-suppress",
        "3306",
        "-Xcompiler",
        "-Wno-c++20-extensions",
        *includes,
        "-DWITH_CUDA",
        "-o",
        str(output),
        str(source),
    ]
