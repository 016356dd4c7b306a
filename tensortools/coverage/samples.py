"""Running PyTorch's operator samples (op_db) through a type and judging the answers
against the plain computation. (op_db, the comparison and the seeded call are shared with
the testing kit: ``tensortools._samples``, re-exported here.)"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from tensortools._samples import (
    UNDEFINED_VALUES,
    OpSample,
    compare_results,
    op_db,
    op_db_samples,
    plain_values,
    seeded,
    tensors_of,
)
from tensortools._spec import spec_for

__all__ = [
    "SAMPLE_RESULTS",
    "SampleResult",
    "check_sample",
    "explain_refusal",
    "OpSample",
    "op_db",
    "op_db_samples",
    "op_db_size",
    "sample_cases",
    "UNDEFINED_VALUES",
    "compare_results",
    "plain_values",
    "seeded",
]

#: What a sample run through a type gives: the plain answer, a different one, a clear
#: TypeError, or another exception.
SAMPLE_RESULTS = ("correct", "wrong", "refused", "error")


@dataclasses.dataclass
class SampleResult:
    result: str  # one of SAMPLE_RESULTS
    reason: str = ""


def sample_cases(
    max_samples: int | None = 2,
    dtype: torch.dtype = torch.float32,
    on_entry: Callable[[], None] | None = None,
    ops: Iterable[str] | None = None,
) -> Iterator[tuple[str, Callable, Any, tuple, dict]]:
    """(op_db name, function, input, args, kwargs) for up to `max_samples` (None: all) CPU
    samples of each op_db entry supporting `dtype` (of those named in `ops`, where given);
    `on_entry()` is called after each op_db entry taken (for progress:
    :func:`op_db_size` entries in all). Needs the expecttest package."""
    wanted = None if ops is None else set(ops)
    for info in op_db():
        if wanted is not None and info.name not in wanted:
            continue
        if dtype in info.supported_dtypes("cpu"):
            try:
                # (None: every sample; op_db_samples counts to a number)
                samples = op_db_samples(
                    info, dtype, sys.maxsize if max_samples is None else max_samples
                )
            except Exception:  # an entry whose sample generator fails on this build
                samples = []
            for s in samples:
                yield info.name, info.op, s.input, s.args, s.kwargs
        if on_entry:
            on_entry()


def op_db_size(ops: Iterable[str] | None = None) -> int:
    """The number of entries in PyTorch's op_db (of those named in `ops`, where given;
    needs the expecttest package)."""
    if ops is None:
        return len(op_db())
    wanted = set(ops)
    return sum(info.name in wanted for info in op_db())


# CPython's words when a method of torch.Tensor is called unbound on what is not a tensor.
_UNBOUND = re.compile(r"descriptor '(\w+)' for '[\w.]+' objects doesn't apply to a '(\w+)'")


def explain_refusal(cls: type, err: TypeError) -> str:
    """Why a sample was refused, in the type's words where the raw message is Python's."""
    message = str(err).splitlines()[0] if str(err) else ""
    if _UNBOUND.search(message):
        return (
            "torch.Tensor's methods called unbound, as torch.Tensor.f(x), take only a "
            f"torch.Tensor, and a {cls.__name__} is not one: Python refuses the call before "
            "torch's dispatch sees it"
        )
    return f"TypeError: {message[:160]}"


def check_sample(
    cls: type, op: Callable, inp: Any, args: tuple, kwargs: dict, name: str = ""
) -> SampleResult | None:
    """Run one sample of `op` (op_db entry `name`) through `cls` and compare with the
    plain computation; None when the type has no stand-in for the sample (see
    its TypeSpec), or the plain call itself fails."""
    spec = spec_for(cls)
    substituted = spec.substitute(cls, inp, args, kwargs)
    if substituted is None:
        return None
    t_inp, t_args, t_kwargs = substituted
    p_inp, p_args, p_kwargs = plain_values(substituted)
    try:
        want = seeded(lambda: op(p_inp, *p_args, **p_kwargs))
    except Exception:
        return None
    try:
        got, problem = seeded(lambda: spec.call(cls, lambda: op(t_inp, *t_args, **t_kwargs)))
    except TypeError as err:
        return SampleResult("refused", explain_refusal(cls, err))
    except Exception as err:
        return SampleResult("error", f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
    rule = spec.rule_for(cls)
    x = next((a for a in tensors_of(substituted) if isinstance(a, cls)), None)
    problem = problem or (rule(x, got) if rule is not None else "")
    if problem:
        return SampleResult("wrong", problem)
    if (name or getattr(op, "__name__", "")) in UNDEFINED_VALUES:
        got = [
            plain_values(g).copy_(w)
            if (plain_values(g).shape, plain_values(g).dtype) == (w.shape, w.dtype)
            else g
            for g, w in zip(tensors_of(got), tensors_of(want))
        ]
        want = tensors_of(want)
    try:
        reason = compare_results(got, want, exact=spec.exact)
    except Exception as err:
        return SampleResult("error", f"result not comparable: {type(err).__name__}: {err}"[:160])
    return SampleResult("wrong", reason) if reason else SampleResult("correct")
