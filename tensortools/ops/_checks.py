"""Argument checks the Python entry points of every operator share: what C++ cannot see."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor
from torch.overrides import has_torch_function


def _is_dtensor(arg: Tensor) -> bool:
    # No DTensor exists before torch.distributed.tensor is imported: no import cost here.
    # (While another thread imports it, the module is listed before DTensor is defined in
    # it: no argument can be one yet.)
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return dtensor is not None and isinstance(arg, dtensor)


def overridden(args: tuple) -> bool:
    """Whether an operator's call goes to ``__torch_function__`` first: ``has_torch_function``,
    asked only while torch function dispatch is on. torch.compile answers
    ``has_torch_function`` with no regard for a caller's ``DisableTorchFunctionSubclass``
    (a type's fallback running the operator on its instances as plain tensors), so a traced
    call came back to the type until torch raised "no implementation found". Eager, both
    answer alike."""
    return has_torch_function(args) and (
        torch._C._is_torch_function_enabled() or torch._C._is_torch_function_mode_enabled()
    )


def check_tensors(fn_name: str, names: tuple[str, ...], args: tuple) -> None:
    """Tensors, plain and strided ones: the operators have kernels for the strided layout
    only, so a sparse tensor would meet the dispatcher's error, and a DTensor torch's
    sharding-rule error; neither names the argument."""
    for name, arg in zip(names, args):
        if not isinstance(arg, Tensor):
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a torch.Tensor, "
                f"got {type(arg).__name__}"
            )
        if _is_dtensor(arg):
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' is a DTensor (a parameter of a module "
                "under fully_shard outside its forward, or a distributed tensor); the "
                f"operators take plain tensors: call the module, or pass '{name}' as "
                ".full_tensor() or .to_local()"
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
