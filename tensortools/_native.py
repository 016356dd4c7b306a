"""Loads the compiled extension, which registers the ``torch.ops.tensortools`` operators.

Normally that is the module ``tensortools._C`` built by ``setup.py``. With
``TENSORTOOLS_JIT=1`` (or ``=verbose``) the same sources are compiled at import time by
``torch.utils.cpp_extension.load`` instead, announced on stderr. ``TENSORTOOLS_SANITIZE``
(e.g. ``address,undefined``) takes the JIT path too, building with those sanitizers under a
name of its own (docs/sanitizers.md).
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

import torch  # noqa: F401  (the extension links against torch's libraries)

from tensortools._extension import jit_load, sanitizers


def _load() -> ModuleType:
    jit = os.environ.get("TENSORTOOLS_JIT", "0").strip().lower()
    # Only the JIT path builds with sanitizers (setup.py refuses to): loading the plain
    # tensortools._C under TENSORTOOLS_SANITIZE would check nothing and pass.
    if jit not in ("", "0", "false", "no", "off") or sanitizers():
        module = jit_load(verbose=jit == "verbose")
        # `import tensortools._C` must now find this module: loading the built one as
        # well would register every operator twice, which aborts the process.
        sys.modules["tensortools._C"] = module
        return module
    try:
        from tensortools import _C
    except ImportError as exc:
        raise ImportError(
            "tensortools._C, the compiled part of tensortools, could not be imported "
            f"({exc}). Build it with `bash scripts/run.sh setup` or "
            "`pip install --no-build-isolation -e .`, or set TENSORTOOLS_JIT=1 to compile "
            "it at import time."
        ) from exc
    return _C


C = _load()
