"""tensortools: custom PyTorch tensor types and fused operators with C++/CUDA kernels.

The compiled operators are registered under ``torch.ops.tensortools`` on import.

The tools (``tensortools.testing``, ``tensortools.coverage``, ``tensortools.bench``) are
imported when first used, not by ``import tensortools``: they need packages the runtime
does not (``pip install tensortools[testing]`` or ``tensortools[bench]``).
"""

import importlib
from typing import Any

from tensortools import _compile_fixes, dispatch, nn, ops, reference  # noqa: F401
from tensortools._native import C as _C
from tensortools.types import (
    CallStats,
    CapturedLogs,
    LoggingTensor,
    MetadataTensor,
    ScalarTensor,
    capture_logs,
    collate,
    decollate,
)

# The one place the version is written: the package metadata reads it from here
# (pyproject.toml: [tool.setuptools.dynamic]).
__version__ = "0.1.0"

with_cuda: bool = _C.with_cuda
"""Whether this build of tensortools has CUDA kernels."""

_TOOLS = ("testing", "coverage", "bench")

# The public surface (docs/api). The tools are left out on purpose: they are attributes
# imported on first use, so that `from tensortools import *` needs torch alone.
__all__ = [
    "ScalarTensor",
    "MetadataTensor",
    "LoggingTensor",
    "capture_logs",
    "CapturedLogs",
    "CallStats",
    "collate",
    "decollate",
    "dispatch",
    "nn",
    "ops",
    "reference",
    "with_cuda",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # tensortools.testing and the other tools, imported on first use (the import system
    # then sets the attribute, so this runs once per tool)
    if name in _TOOLS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TOOLS))
