"""How the C++/CUDA extension is built: one description for setup.py and the JIT path.

This module imports nothing from tensortools, so setup.py can load it from its path
before the package (and its compiled part) exists.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
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
        # A release build has no debug information (Python's own CFLAGS ask for -g): a
        # 48 MB module stripped to about 1 MB, and less for the compiler to write.
        cxx_flags=[
            *opt,
            *([] if debug else ["-g0"]),
            "-fopenmp",
            "-fno-trapping-math",
            "-fno-math-errno",
            *san_flags,
        ],
        nvcc_flags=opt,
        link_flags=[
            *_shared_cpp_runtime(),
            "-fopenmp",
            *([f"-fsanitize={sanitize}"] if sanitize else []),
        ],
    )


def _shared_cpp_runtime() -> list[str]:
    """Link flags that make the extension use the C++ runtime torch has loaded.

    A compiler that links libstdc++ statically (seen on a GPU machine, where the driver's
    own ``-lstdc++`` found only the archive) gives the extension a second C++ runtime,
    whose locale ids differ from torch's: a stream made here and written to by libc10 (a
    SymInt in an error message) then crashes the process. Naming the shared library this
    process loaded, by its path, before the driver's own ``-lstdc++`` makes it provide
    every symbol; the static one then adds nothing.
    """
    if not sys.platform.startswith("linux"):
        return []
    import torch  # noqa: F401  (loads the libstdc++ torch was built against)

    try:
        with open("/proc/self/maps") as maps:
            loaded = {line.split()[-1] for line in maps if "/libstdc++.so" in line}
    except OSError:
        loaded = set()
    return sorted(loaded)[:1] or ["-lstdc++"]


def jit_load(verbose: bool = False) -> ModuleType:
    """Compile the same sources with torch.utils.cpp_extension.load and import them."""
    from torch.utils.cpp_extension import load

    if not any(CSRC.rglob("*.cpp")):
        # An installed wheel ships the compiled module, not the C++ sources.
        raise ImportError(
            f"TENSORTOOLS_JIT compiles tensortools' C++ sources, which are not here ({CSRC}): "
            "it works from a source checkout (git clone, then run from it); unset it to use "
            "the built tensortools._C"
        )
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


# -- a clear error when the build cannot see torch --------------------------------------


def without_isolation(argv: list[str]) -> list[str] | None:
    """The build command `argv` (a command line of pip, uv or `python -m build`, as the
    platform reports it) with build isolation turned off, or None for a command this
    does not know or one that turns it off already."""
    head, rest = _split_tool(argv)
    tool = Path(head[-1]).name if head else ""
    if tool == "build":  # python -m build
        return None if "--no-isolation" in rest else [*head, "--no-isolation", *rest]
    if tool == "uv":
        if rest[:1] == ["pip"]:
            head, rest = [*head, "pip"], rest[1:]
        verbs = ("install", "sync", "build", "wheel")
    elif tool.startswith("pip"):  # pip, pip3, pip3.11
        verbs = ("install", "wheel", "download")
    else:
        return None
    if "--no-build-isolation" in rest:
        return None
    for i, word in enumerate(rest):
        if word in verbs:
            return [*head, *rest[: i + 1], "--no-build-isolation", *rest[i + 1 :]]
    return None


def _split_tool(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the words naming the tool, its arguments): `python [options] -m tool` as typed;
    a script started by its shebang line (`/venv/bin/python /venv/bin/pip`) as `pip`."""
    if argv and Path(argv[0]).name.startswith("python"):
        for i, word in enumerate(argv[1:], start=1):
            if word == "-m":
                return argv[: i + 2], argv[i + 2 :]
            if not word.startswith("-"):
                return [Path(word).name], argv[i + 1 :]
        return argv, []
    return [Path(argv[0]).name] if argv else [], argv[1:]


def _parent() -> tuple[list[str], str]:
    """The command line of the process that runs this build (pip, say) and, when that
    is a Python, the interpreter as it was started (a virtual environment's own path,
    not the base interpreter its link points to), where the platform shows them
    (Linux's /proc); ([], "") elsewhere."""
    proc = Path(f"/proc/{os.getppid()}")
    try:
        raw = (proc / "cmdline").read_bytes()
        cwd = os.readlink(proc / "cwd")
    except OSError:
        return [], ""
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    python = ""
    if argv and Path(argv[0]).name.startswith("python"):
        python = argv[0] if "/" in argv[0] else (shutil.which(argv[0]) or "")
        python = os.path.join(cwd, python) if python else ""
    return argv, python


def _torch_version(python: str) -> str | None:
    """The version of torch that `python` imports with build isolation's environment
    (PYTHONPATH, PYTHONNOUSERSITE) taken away, or None."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    try:
        proc = subprocess.run(
            [python, "-c", "import torch; print(torch.__version__)"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def torch_missing_message(
    command: list[str], isolated: bool, torch_outside: str | None, error: str = ""
) -> str:
    """What to tell a user whose build cannot import torch: `command` is the command
    line that runs the build ([] when unknown), `isolated` whether the build runs in an
    isolated environment, `torch_outside` the torch version installed outside it, and
    `error` what importing torch raised."""
    fixed = without_isolation(command)
    retry = (
        shlex.join(fixed)
        if fixed
        else "your pip command with --no-build-isolation added, e.g. pip install "
        "--no-build-isolation ."
    )
    if isolated and torch_outside:
        return (
            f"tensortools builds against the torch you installed ({torch_outside}), but "
            "this build runs with build isolation: in a separate environment, where that "
            f"torch cannot be seen. Build without isolation:\n    {retry}"
        )
    return (
        "tensortools builds against an installed torch, and this build cannot import one"
        f"{f' ({error})' if error else ''}"
        f"{' in its isolated environment' if isolated else ''}. Install torch first "
        "(pip install torch==2.13.0, or the build for your CUDA from pytorch.org), then "
        f"build without isolation:\n    {retry}"
    )


def _isolated() -> bool:
    """Whether this build runs with build isolation: pip's hides site-packages through a
    PYTHONPATH entry under a pip-build-env-* folder; `python -m build` and uv run the
    build in virtual environments of their own (build-env-*, uv's builds-v0 cache)."""
    pythonpath = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if any(Path(p).parent.name.startswith("pip-build-env-") for p in pythonpath if p):
        return True
    prefix = Path(sys.prefix)
    return prefix.name.startswith("build-env-") or prefix.parent.name == "builds-v0"


def explain_missing_torch(error: str = "") -> str:
    """torch_missing_message for the build running now (`error`: what importing torch
    raised)."""
    command, parent_python = _parent()
    isolated = _isolated()
    torch_outside = None
    if isolated:
        pythons = [sys.executable]
        if Path(parent_python).name.startswith("python"):
            pythons.append(parent_python)
        torch_outside = next(filter(None, map(_torch_version, pythons)), None)
    return torch_missing_message(command, isolated, torch_outside, error)
