"""The ``promotion`` check: calls on integer and bool instances, calls mixing a float32
instance with tensors or numbers of other dtypes, and an integer instance with float
numbers and tensors (``int * 2.5``), give the plain run's result dtype and values
(torch's type promotion, under the default dtype float32).

The other checks run float32 samples, where a handler that casts its result to its
input's dtype, or to float32, is right by accident."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_map_only

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.run import Run, is_size
from tensortools.testing.samples import Sample, op_samples, tensor_leaves

__all__ = ["MIXED", "MIXED_WITH_INTEGER", "check_promotion", "promotion_samples"]

#: What the floating-point tensors beside a float32 instance become: name -> form.
MIXED: dict[str, Callable[[Tensor], Any]] = {
    "a float64 tensor": lambda t: t.double(),
    "an int64 tensor": lambda t: t.round().long(),
    "a 0-d float64 tensor": lambda t: t.reshape(-1)[0].double() if t.numel() else t,
    "a Python number": lambda t: t.reshape(-1)[0].item() if t.numel() else t,
}

#: What the other tensors beside an integer instance become (int * 2.5 is float32).
MIXED_WITH_INTEGER: dict[str, Callable[[Tensor], Any]] = {
    "a float Python number": lambda t: t.reshape(-1)[0].item() + 0.5 if t.numel() else t,
    "a float32 tensor": lambda t: t.float() + 0.5,
}

#: The dtypes whose op_db samples the check runs besides float32's.
DTYPES = (torch.int64, torch.bool)


def promotion_samples(ops: Any) -> list[Sample]:
    """The first integer and bool sample of each function (every tensor an instance)."""
    return list(op_samples(ops, DTYPES, 1, ("every",)))


def check_promotion(run: Run, s: Sample) -> None:
    """`s` as it is (an integer or bool sample), and once per form of :data:`MIXED`
    taken by the other floating-point tensors of a float32 sample, or of
    :data:`MIXED_WITH_INTEGER` taken by the other int64 tensors of an int64 sample (its
    first picked tensor the only instance)."""
    if s.name in UNDEFINED_VALUES or s.name.endswith("_"):
        return
    leaves, first = tensor_leaves(s.call), s.picks[0]
    if not leaves[first].is_floating_point():
        _compare(run, s)
    if leaves[first].dtype == torch.float32:
        mixed, others_of = MIXED, lambda t: t.is_floating_point()
    elif leaves[first].dtype == torch.int64:
        mixed, others_of = MIXED_WITH_INTEGER, lambda t: t.dtype == torch.int64
    else:
        return
    others = [
        k for k, t in enumerate(leaves) if k != first and others_of(t) and t.layout == torch.strided
    ]
    if not others:
        return
    for what, form in mixed.items():
        position = iter(range(len(leaves)))

        def one(t: Tensor, form=form) -> Any:
            return form(t) if next(position) in others else t

        inp, args, kwargs = tree_map_only(Tensor, one, s.call, is_leaf=is_size)
        mixed_sample = dataclasses.replace(
            s, input=inp, args=args, kwargs=kwargs, picks=(first,), variant=f"beside {what}"
        )
        _compare(run, mixed_sample)


def _compare(run: Run, s: Sample) -> None:
    typed = run.typed_call(s)
    if typed is None:
        return
    try:
        want = seeded(lambda: run.want(s.info.op, run.plain_call(typed)))
    except Exception:
        return  # the plain call refuses these dtypes
    x, args, kwargs = typed
    try:
        got = seeded(lambda: s.info.op(x, *args, **kwargs))
    except Exception as err:
        run.raised("promotion", s, err)
        return
    reason = compare_results(run.plain(got), want, exact=False)
    if reason:
        run.fail("promotion", s, reason)
