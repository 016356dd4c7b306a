"""ScalarTensor's elementwise handlers, derived from one property instead of written one
by one: an elementwise function f with f(0) = 0 maps ``value * I`` to ``f(value) * I``.

Each function below is applied to the probe (the pair ``[value, 0]`` repeated), with the
call's own further arguments when they are numbers (or plain 0-d tensors, strings,
None), or another ScalarTensor of the same size, whose probe goes alongside (d == e). It
is structured when the off-diagonal entry stays 0 (``cos``, ``exp``, ``clamp(d, min=1)``,
``d > -1`` do not: they take the dense path) and torch's two CPU loops agree
(``remainder(d, 1e-30)`` of a large value does not). So the table holds functions that
are elementwise: that is the one property a function must have to be listed, and the
probe checks the other on every call.

See Note [ScalarTensor's exact answers] in docs/design.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tensortools._native import C as _C
from tensortools.types.scalar.common import (
    pair_in,
    plain_operand,
    probe,
    probed_result,
    structured,
)
from tensortools.types.scalar.tensor import ScalarTensor

__all__ = ["ELEMENTWISE", "flags_of"]


def _functions(namespace: Any, names: str) -> list[Callable]:
    """The functions of `namespace` named in `names` that this torch has."""
    return [getattr(namespace, n) for n in names.split() if hasattr(namespace, n)]


#: Elementwise functions of one tensor and, besides it, only numbers or settings. Their
#: method forms (``d.sin()``) come along; in-place forms (``d.sin_()``) keep their own
#: rules (:mod:`~tensortools.types.scalar.in_place`).
ELEMENTWISE: tuple[Callable, ...] = tuple(
    _functions(
        torch,
        "abs absolute positive sign sgn signbit sqrt square sin sinh tan tanh asin arcsin asinh "
        "arcsinh atan arctan atanh arctanh expm1 log1p erf erfinv trunc fix floor ceil round "
        "frac deg2rad rad2deg relu nan_to_num isnan isinf isposinf isneginf angle "
        # with numbers besides the tensor; the pair tells when the result leaves 0 off
        # the diagonal (clamp(d, min=1), d > -1, d ** 0)
        "clamp clip clamp_min clamp_max pow float_power remainder fmod floor_divide xlogy "
        "copysign bitwise_and bitwise_left_shift bitwise_right_shift logical_and "
        "eq ne lt le gt ge less less_equal greater greater_equal not_equal "
        "maximum minimum fmax fmin",
    )
    + _functions(torch.special, "erf erfinv expm1 log1p round i1 i1e entr bessel_j1 xlogy xlog1py")
    + _functions(
        F,
        "relu relu6 elu selu celu leaky_relu hardtanh gelu silu mish hardswish softsign "
        "tanhshrink hardshrink softshrink threshold rrelu",
    )
    # casts: 0 stays 0 in every dtype, and the pair moves where the matrix would
    + _functions(Tensor, "to double float half bfloat16 int long short char byte bool cpu")
)


def _passes_to_pair(x: Any, like: ScalarTensor) -> bool:
    """Whether x can go to the pair's call as it is: a number or plain 0-d tensor (see
    plain_operand), a string, a dtype, device or memory format, or None; not a finite
    number that the call's floating dtype holds only as 0 or infinity (pow(x, 5e-324) in
    float32 is 1 off the diagonal of a large tensor, 0 on a small one): C's
    ``number_passes``.

    See Note [ScalarTensor's exact answers] in docs/design.md."""
    if x is None or isinstance(x, (str, torch.dtype, torch.device, torch.memory_format)):
        return True
    if plain_operand(x, like) is None:
        return False
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return _C.scalar_number_passes(x, like._pair)
    return True


def _alike(x: Any, like: ScalarTensor) -> bool:
    """Whether x is a ScalarTensor that combines with like entry for entry: the same N,
    on the same device."""
    return isinstance(x, ScalarTensor) and x.N == like.N and x.device == like.device


def _pairs_of(args: tuple, kwargs: dict, n: int) -> tuple[tuple, dict]:
    """args and kwargs (flat: settings and ScalarTensors) with each ScalarTensor replaced
    by its probe, or for n <= 1 by its pair cut to n entries, like the one it meets."""

    def pair(x: Any) -> Any:
        if not isinstance(x, ScalarTensor):
            return x
        return probe(x) if n > 1 else pair_in(x)[:n]

    return tuple(pair(a) for a in args), {k: pair(v) for k, v in kwargs.items()}


def flags_of(func: Callable) -> tuple[tuple[str, int | None], ...]:
    """func's flags that the pair must not meet, each with its position among the
    further arguments (None if keyword-only): inplace (the rules of in_place) and
    training (rrelu's random slope per entry). Builtins have none."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return ()
    return tuple(
        (p.name, i - 1 if p.kind is p.POSITIONAL_OR_KEYWORD else None)
        for i, p in enumerate(parameters)
        if p.name in ("inplace", "training")
    )


def _elementwise(func: Callable) -> Callable:
    flags = flags_of(func)

    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(input, ScalarTensor):
            return NotImplemented  # (number ** d and the like: not zero-preserving)
        for name, position in flags:
            if kwargs.get(name) or (
                position is not None and len(args) > position and args[position]
            ):
                return NotImplemented
        pair = input._pair
        if args or kwargs:
            further = (*args, *kwargs.values())
            if not all(_passes_to_pair(a, input) or _alike(a, input) for a in further):
                return NotImplemented
            # another ScalarTensor of the same size (d == e, maximum(d, e)): its pair,
            # whose entries meet d's entry for entry
            if any(isinstance(a, ScalarTensor) for a in further):
                args, kwargs = _pairs_of(args, kwargs, input.N)
        if input.N <= 1 or pair.is_meta:
            return _small(func, input, args, kwargs)
        stand_in = probe(input)
        try:
            result = func(stand_in, *args, **kwargs)
        except TypeError:
            return NotImplemented  # arguments func does not take: the dense call's error
        if result is stand_in:
            return input  # torch returns its input (x.float() of a float32 x): so does this
        # (a meta result has no values to look at, and probed_result declines it)
        return probed_result(input, result)

    handler.__name__ = f"_elementwise_{getattr(func, '__name__', 'function')}"
    return handler


def _small(func: Callable, d: ScalarTensor, args: tuple, kwargs: dict) -> Any:
    """The handler's answer for N <= 1 and on the meta device. For N <= 1 there is no
    entry off the diagonal: the dense matrix is empty (nothing computed, so nothing
    raised: 0 // 0 on integers) or one element, for which torch runs its scalar loop
    rather than its vectorised one (the two can differ in the last bits): the pair is cut
    to match. On the meta device there are no values to look at: the dense call answers."""
    pair = d._pair
    if pair.is_meta:
        return NotImplemented
    pair = pair[: d.N]
    try:
        part = func(pair, *args, **kwargs)
    except TypeError:
        return NotImplemented
    if part.is_meta:
        return NotImplemented
    if part is pair:
        return d
    pair = part.new_zeros(2)
    pair[: d.N] = part
    return ScalarTensor._from_pair(d.N, pair)


for _func in ELEMENTWISE:
    structured(_func)(_elementwise(_func))
