"""A fix of torch 2.13's compiled code for tensors of tensortools' types.

On the first call of each compiled graph, AOTAutograd runs the graph under a dispatch
mode that checks custom operators for aliasing (``_AnalyzeCustomOpInputOutputMode``,
while ``torch._functorch.config.check_custom_op_aliasing`` is on). That mode declines
every call with a tensor whose type is not a plain tensor, so that the type's own
``__torch_dispatch__`` may run; a type that has none (every ``__torch_function__``
type, tensortools' among them) is then left with no handler, and the call fails with
``TypeError: Multiple dispatch failed``: inductor's matrix products and convolutions,
any call under ``aot_eager``, and a training step over inputs that require grad
(pytorch/pytorch#193932, fixed upstream by pytorch/pytorch#193968).

Here the mode runs a call whose tensors are plain or of tensortools' types without the
check, as the plain tensors the compiled graph was traced for; calls with any other type
go to torch's mode as before. Applied when torch's compiler front end loads, only where
torch has that mode. ``tests/test_compile_inductor.py`` runs what it fixes, and
``tests/test_compile_limits.py`` shows torch still failing a bare subclass; when a torch
release compiles it, this module can go.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools._compiler import when_dynamo_loads

__all__: list[str] = []

_NONE = torch._C._disabled_torch_dispatch_impl  # (a type's __torch_dispatch__ where it has none)


def _ours_or_plain(args: tuple, kwargs: dict | None) -> bool:
    """Whether every tensor among a call's arguments is plain (or a Parameter) or of a
    tensortools type, with at least one of tensortools' types."""
    from torch.nn import Parameter

    from tensortools.dispatch.wrapper import TensorWrapper

    ours = False
    for leaf in tree_leaves((args, kwargs)):
        kind = type(leaf)
        if kind is Tensor or kind is Parameter or not isinstance(leaf, Tensor):
            continue
        if not issubclass(kind, TensorWrapper) or kind.__torch_dispatch__ is not _NONE:
            return False
        ours = True
    return ours


@when_dynamo_loads
def _let_the_aliasing_check_run_our_types() -> None:
    from torch._functorch._aot_autograd import runtime_wrappers

    mode = getattr(runtime_wrappers, "_AnalyzeCustomOpInputOutputMode", None)
    if mode is None or getattr(mode.__torch_dispatch__, "_tensortools", False):
        return
    declines = mode.__torch_dispatch__

    def __torch_dispatch__(self: Any, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        if _ours_or_plain(args, kwargs):
            # (inside a mode's own __torch_dispatch__ the mode is off: the call runs below it)
            return func(*args, **(kwargs or {}))
        return declines(self, func, types, args, kwargs)

    __torch_dispatch__._tensortools = True  # type: ignore[attr-defined]
    mode.__torch_dispatch__ = __torch_dispatch__
