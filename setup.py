"""Builds tensortools and its extension module tensortools._C.

Build against the torch you have installed:
    pip install --no-build-isolation -e .
Environment: FORCE_CUDA=1 builds the CUDA kernels without a visible GPU,
TORCH_CUDA_ARCH_LIST picks the GPU architectures, MAX_JOBS bounds parallel compile jobs,
TENSORTOOLS_DEBUG=1 compiles with -O0 -g. TENSORTOOLS_SANITIZE is refused: sanitized
builds are JIT builds of their own (scripts/sanitize.sh, docs/sanitizers.md).
TENSORTOOLS_PREBUILT=PATH packages that already built tensortools._C instead of compiling
it again (scripts/run.sh test hands the clean room its in-place build: one compile a run).
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "_tensortools_extension", ROOT / "tensortools" / "_extension.py"
)
_extension = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _extension  # dataclasses look their module up while defining
_spec.loader.exec_module(_extension)

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError as exc:
    raise SystemExit(_extension.explain_missing_torch(f"{type(exc).__name__}: {exc}")) from exc
if _extension.sanitizers():
    # A sanitized tensortools._C would replace the normal one and abort every import that
    # does not preload the sanitizer runtimes.
    raise SystemExit(
        "TENSORTOOLS_SANITIZE is for the JIT build (scripts/sanitize.sh); "
        "unset it to build tensortools._C"
    )
cfg = _extension.build_config()


class build_ext(BuildExtension.with_options(use_ninja=True)):
    """torch's BuildExtension, or, with TENSORTOOLS_PREBUILT, a copy of the extension built
    before from these sources with this torch (the file name carries the ABI tag)."""

    def build_extension(self, ext):
        prebuilt = os.environ.get("TENSORTOOLS_PREBUILT")
        if not prebuilt:
            return super().build_extension(ext)
        target = Path(self.get_ext_fullpath(ext.name))
        if Path(prebuilt).name != target.name:
            raise SystemExit(f"TENSORTOOLS_PREBUILT={prebuilt} is not a build of {target.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(prebuilt, target)


Extension = CUDAExtension if cfg.with_cuda else CppExtension
extra_compile_args = {"cxx": cfg.cxx_flags}
if cfg.with_cuda:
    extra_compile_args["nvcc"] = cfg.nvcc_flags

setup(
    # tensortools._C is tied to the torch it was compiled against (its C++ ABI): the package
    # requires that torch and no other ("2.13.0+cpu" -> torch==2.13.0, which any local
    # build of 2.13.0 satisfies). The runtime needs nothing else.
    install_requires=[f"torch=={torch.__version__.split('+')[0]}"],
    packages=find_packages(include=["tensortools", "tensortools.*"]),
    ext_modules=[
        Extension(
            "tensortools._C",
            cfg.sources,
            define_macros=cfg.define_macros,
            extra_compile_args=extra_compile_args,
            extra_link_args=cfg.link_flags,
        )
    ],
    cmdclass={"build_ext": build_ext},
)
