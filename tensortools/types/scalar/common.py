"""What ScalarTensor's handler families share: how a handler registers, the two small
things a handler computes on instead of the dense matrix, range checks, and the
one-pass kernels.

Elementwise handlers run on the **probe**, d's pair ``[value, 0]`` repeated
(:func:`probe`, :func:`probed_result`); reductions and linear algebra on a **small
matrix**, the dense ``value * I_k`` for k <= 2 (:func:`small_matrix`).

See Note [ScalarTensor's exact answers] in docs/design.md.

Under torch.func, a tensor a handler meets may be one of its wrapped tensors (batched
under vmap, tracking gradients under grad, jvp and jacrev, functional under
functionalize): it has no storage to read and no value to branch on (vmap refuses
``bool`` and ``item``). Handlers hand such an operand to the dense call
(:func:`hidden`). A call without one is a constant of the transform (d's pair needs no
gradient), and its handler runs below the transforms (:func:`structured`): there, every
tensor it makes is plain, where grad and jvp would wrap even a tensor made from d's pair.

This module imports no handler family; the families import it.
"""

from __future__ import annotations

import cmath
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools._native import C as _C
from tensortools.types.scalar.tensor import ScalarTensor

__all__ = [
    "KERNEL_DTYPES",
    "structured",
    "probe",
    "probed_result",
    "pair_in",
    "hidden",
    "transforms_active",
    "plain_operand",
    "finite",
    "in_range",
    "small_matrix",
    "index_tensor",
    "is_reduction_option",
    "on_small_matrix",
    "result_tensors",
    "column_axis",
    "rebuilt",
    "ACCUMULATE_IN",
    "accumulated_total",
    "call_kernel",
    "scale_finite",
]


def structured(*funcs: Callable) -> Callable[[Callable], Callable]:
    """Register a structured handler for funcs on ScalarTensor. Calls with ``out=`` are
    left to the fallback, which writes the dense answer with torch's own out= rules (a
    subclass's handlers get out= like any other argument). Each handler returns
    NotImplemented where the dense answer is not a cheap structured one; the policy then
    decides (dense fallback by default). Under a torch.func transform, a call none of
    whose tensors is the transform's (see :func:`hidden`) runs below it."""

    def register(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def without_out(*args, out=None, **kwargs):
            if out is not None:
                return NotImplemented
            if transforms_active() and not _any_hidden(args, kwargs):
                with torch._C._DisableFuncTorch():
                    return handler(*args, **kwargs)
            return handler(*args, **kwargs)

        ScalarTensor.implements(*funcs)(without_out)
        return handler

    return register


def pair_in(d: ScalarTensor, dtype: torch.dtype | None = None) -> Tensor:
    """d's pair itself (handlers only read it), or a copy in another dtype."""
    return d._pair if dtype is None else d._pair.to(dtype)


def probe(d: ScalarTensor) -> Tensor:
    """The tensor an elementwise function of d runs on in place of d's pair: the pair
    repeated, so that torch's vector loop computes its first copy and its scalar loop
    its last (C's ``probe_of``, csrc/python/scalar_dispatch.cpp).

    See Note [ScalarTensor's exact answers] in docs/design.md."""
    return _C.scalar_probe(d._pair)


def probed_result(d: ScalarTensor, result: Any) -> Any:
    """The ScalarTensor of d's size for a function's result on the probe; NotImplemented
    where the dense answer is not value * I for every N: the off-diagonal entry is not 0,
    or the two loops disagree (then the dense matrix's diagonal holds whichever loop
    computed each entry, which depends on N)."""
    if type(result) is not Tensor:
        return NotImplemented
    pair = _C.scalar_probed_pair(result)
    return NotImplemented if pair is None else ScalarTensor._from_pair(d.N, pair)


#: hidden(t): whether t is one of torch.func's wrapped tensors, whose values a handler
#: cannot read or branch on; it declines them, and the dense call (which torch.func
#: transforms) answers.
hidden: Callable[[Tensor], bool] = torch._C._functorch.is_functorch_wrapped_tensor

#: Whether a torch.func transform is running (then its wrapped tensors may reach a call).
transforms_active: Callable[[], bool] = torch._C._are_functorch_transforms_active


def _any_hidden(args: tuple, kwargs: dict) -> bool:
    return torch.utils._pytree.tree_any(
        lambda x: isinstance(x, Tensor) and hidden(x), (args, kwargs)
    )


def plain_operand(x: Any, like: ScalarTensor) -> Any:
    """x if it is a Python number or a plain 0-d tensor on like's device that needs no
    gradient and is no torch.func wrapper (what a structured result can absorb); else
    None."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if (
        type(x) is Tensor
        and x.dim() == 0
        and not x.requires_grad
        and x.device == like.device
        and not hidden(x)
    ):
        return x
    return None


def finite(x: Any) -> bool:
    """Whether a Python number (as ``tolist`` or ``item`` gives it) is finite. (On Python
    numbers: a 0-d tensor's torch.isfinite costs more than a whole structured call.)"""
    return cmath.isfinite(x) if isinstance(x, complex) else math.isfinite(x)


#: in_range(x, dtype): whether a magnitude the dense call computes on the way (a sum, a
#: sum of squares) lies well inside dtype's range: C's rule (scalar_dispatch.cpp).
#: See Note [ScalarTensor's exact answers] in docs/design.md.
in_range: Callable[[float, torch.dtype], bool] = _C.scalar_in_range


def _made(kind: str, n: int, device: torch.device) -> Tensor:
    if kind == "small matrix":
        return torch.tensor([[0, 1], [1, 0]], device=device)[:n, :n]
    if kind == "widen":
        index = torch.ones(n, dtype=torch.long, device=device)
        index[:1] = 0
        return index
    return torch.arange(n, device=device)


@functools.lru_cache(maxsize=64)
def _cached(kind: str, n: int, device: torch.device) -> Tensor:
    return _made(kind, n, device)


def index_tensor(kind: str, n: int, device: torch.device) -> Tensor:
    """Index tensors the handlers read (never write): "small matrix" picks value * I_n
    (n <= 2) out of the pair [value, 0]; "widen" picks column 0, then column 1 n - 1
    times; "arange" is 0 .. n - 1. Kept for sizes up to 4096 (at most 64 of them, 2 MB),
    made per call beyond."""
    return _cached(kind, n, device) if n <= 4096 else _made(kind, n, device)


def small_matrix(d: ScalarTensor, k: int) -> Tensor:
    """The dense ``value * I_k`` (k <= 2), with the signed zeros of d's matrix."""
    return d._pair.take(index_tensor("small matrix", k, d._pair.device))


# -- the reductions' small matrix ----------------------------------------------------


def is_reduction_option(x: Any) -> bool:
    """A reduction's argument that is not a tensor: a dim (or dims), a flag, an order, a
    dtype, or None."""
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype)):
        return True
    return isinstance(x, (tuple, list, torch.Size)) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in x
    )


def on_small_matrix(func: Callable, d: Any, args: tuple, kwargs: dict) -> Any:
    """func on the 2x2 (or smaller) small matrix of d, or NotImplemented where the call is
    not one the reductions answer; its errors are left to the dense call, which raises
    them with the matrix's own sizes."""
    if not isinstance(d, ScalarTensor) or d.device.type == "meta":
        return NotImplemented
    if not all(is_reduction_option(a) for a in (*args, *kwargs.values())):
        return NotImplemented  # a tensor operand (max(d, other)): the dense call
    try:
        return func(small_matrix(d, min(d.N, 2)), *args, **kwargs)
    except Exception:
        return NotImplemented


def result_tensors(result: Any) -> list[Tensor]:
    return [result] if isinstance(result, Tensor) else list(result)


def column_axis(result: Any) -> int | None:
    """The axis of the small matrix's result that runs over the matrix's columns (or rows):
    the one of size 2. None when the whole matrix was reduced; -1 when the result is no
    reduction of the matrix (both axes kept)."""
    t = result_tensors(result)[0]
    axes = [a for a, size in enumerate(t.shape) if size == 2]
    if len(axes) > 1:
        return -1
    return axes[0] if axes else None


def rebuilt(like: Any, parts: list[Tensor]) -> Any:
    return parts[0] if isinstance(like, Tensor) else type(like)(parts)


#: The dtypes torch's reductions accumulate in for the half types.
ACCUMULATE_IN = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def accumulated_total(d: ScalarTensor, accumulate: bool = False) -> Tensor:
    """N * value as torch's sum and trace compute it: in float for the half types (which
    do not overflow where the dense sum does not) and returned in the input's dtype (in
    that float with accumulate=True), int64 for integers."""
    v = d._scalar()
    dtype = v.dtype if (v.is_floating_point() or v.is_complex()) else torch.int64
    v = v.to(ACCUMULATE_IN.get(dtype, dtype))
    if d.N == 0:
        total = torch.zeros_like(v)  # the empty sum, also for an Inf value
    elif v.is_complex():  # N * (a + bj) as a sum does it: no a * 0 or b * 0 terms (Inf * 0)
        total = torch.view_as_complex(torch.view_as_real(v) * d.N)
    else:
        total = v * d.N
    if total.is_floating_point() or total.is_complex():
        total = total + 0  # torch's sums start from +0: the sum of -0 values is +0
    return total if accumulate else total.to(dtype)


# -- one-pass kernels ------------------------------------------------------------------


#: Dtypes tensortools' add_diagonal and scale kernels compute in.
KERNEL_DTYPES = frozenset(
    (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
)


def call_kernel(op: Callable, input: Tensor, value: Tensor) -> Any:
    """``op(input, value)`` for a kernel whose arguments the handler has checked
    (``value`` a 0-d tensor of input's dtype and device). Without a gradient to record,
    the call skips the autograd layer, which costs more than the kernel on small inputs."""
    if torch.is_grad_enabled() and (input.requires_grad or value.requires_grad):
        return op(input, value)
    with torch._C._AutoDispatchBelowAutograd():
        return op(input, value)


def scale_finite(input: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``(value * input, whether every element of input is finite)`` in one pass over
    ``input``; the second is a 0-d bool tensor. ``value * I @ input`` equals
    ``value * input`` only for a finite ``input``."""
    return call_kernel(torch.ops.tensortools.scale_finite.default, input, value)
