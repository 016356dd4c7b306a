"""Argument checks the Python entry points of every operator share: what C++ cannot see."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def check_tensors(fn_name: str, names: tuple[str, ...], args: tuple) -> None:
    """Tensors, and strided ones: the operators have kernels for the strided layout only,
    so a sparse tensor would meet the dispatcher's error, which names no argument."""
    for name, arg in zip(names, args):
        if not isinstance(arg, Tensor):
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a torch.Tensor, "
                f"got {type(arg).__name__}"
            )
        if arg.layout != torch.strided:
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a dense (strided) tensor, "
                f"got layout {arg.layout}"
            )


def check_number(fn_name: str, name: str, value: Any) -> None:
    """A real Python number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"tensortools.ops.{fn_name}: '{name}' must be a real number, got {type(value).__name__}"
        )
