"""Packages the tools need and the runtime does not, imported where a tool first uses them:
a missing one is an ImportError that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["tool_import"]


def tool_import(name: str, needed_for: str, extra: str = "testing") -> ModuleType:
    """The module `name`, or an ImportError naming the missing package and the extra of
    tensortools that installs it. ``needed_for`` says what needs it ("check_type's op_db
    samples"). PyTorch's test internals (``torch.testing._internal``) import the
    ``expecttest`` package, which torch does not install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = (exc.name or name).split(".")[0]
        if missing == "torch":  # (a module of torch itself: not an install away)
            raise
        raise ImportError(
            f"{needed_for} needs the {missing!r} package, which tensortools does not "
            f"install by itself: pip install 'tensortools[{extra}]' (or pip install {missing})",
            name=missing,
        ) from exc
