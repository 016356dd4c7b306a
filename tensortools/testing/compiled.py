"""The ``compile`` check: a sample under ``torch.compile`` (the eager backend) equals the
eager call, alone and chained with other calls in one compiled function.

Chains matter because of a hazard of torch.compile itself: where a type's
``__torch_function__`` breaks the graph, dynamo may run code it compiled for an earlier
call of the same compiled function in place of a later one (on MONAI's MetaTensor,
``(x + 0.5) * 2 - x / 3`` ran ``+ 0.5`` as ``* 0.5``). A function compiled alone never
shows it."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from tensortools.coverage.samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.run import Run, method_of, result_tensors
from tensortools.testing.samples import Sample
from tensortools.testing.serialization import _state_differs

__all__ = ["arithmetic_chain", "check_compile"]


def arithmetic_chain(x: Any, y: Any) -> tuple:
    """Operators, methods and reflected operators on two instances, several calls each:
    the chain that showed MONAI's hazard, and its neighbours."""
    return (
        (x + 0.5) * 2 - x / 3,
        x.add(0.5).mul(2).sub(x.div(3)),
        x + y,
        x * y,
        1.5 - x,
    )


# Per run: the last sample the check compiled (a chain pairs it with the next), and
# whether the arithmetic chain has run (once per run, on the first floating-point input).
_LAST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ARITHMETIC_DONE: weakref.WeakSet = weakref.WeakSet()


def check_compile(run: Run, s: Sample) -> None:
    _check_alone(run, s)
    last, _LAST[run] = _LAST.get(run), s
    if run not in _ARITHMETIC_DONE and _check_arithmetic(run, s):
        _ARITHMETIC_DONE.add(run)
    undefined = UNDEFINED_VALUES & {getattr(last, "name", ""), s.name}
    if last is not None and last.name != s.name and not undefined:
        _check_pair(run, last, s)


def _check_alone(run: Run, s: Sample) -> None:
    def call(t: Any) -> Any:
        return s.info.op(t, *s.args, **s.kwargs)

    x = run.typed(s)
    if x is not None:
        _compare(run, s, call, lambda: (run.typed(s),), x, "")


def _check_arithmetic(run: Run, s: Sample) -> bool:
    """The arithmetic chain on instances made from the sample's input; False where it
    has none that the chain can take."""
    x = run.typed(s)
    if x is None or not isinstance(s.input, torch.Tensor) or not s.input.is_floating_point():
        return False
    if run.make(s.input.detach().clone() * 0.5 + 1) is None:
        return False

    def inputs() -> tuple:
        return run.typed(s), run.make(s.input.detach().clone() * 0.5 + 1)

    try:
        seeded(lambda: arithmetic_chain(*inputs()))
    except Exception:  # the type refuses the arithmetic itself: not compile's to judge
        return False
    chain = "chained (x + 0.5) * 2 - x / 3, x.add(0.5).mul(2).sub(x.div(3)), x + y, x * y, 1.5 - x"
    _compare(run, s, arithmetic_chain, inputs, x, chain)
    return True


def _check_pair(run: Run, first: Sample, second: Sample) -> None:
    """The two samples' calls in one compiled function, the first once more after the
    second, each in its method form where it has one (as user code calls them)."""

    def chain(x: Any, y: Any) -> tuple:
        a, b = _form(x, first), _form(y, second)
        return (
            a(*first.args, **first.kwargs),
            b(*second.args, **second.kwargs),
            a(*first.args, **first.kwargs),
        )

    x = run.typed(second)
    if x is None or run.typed(first) is None:
        return
    names = f"chained with {first.name} (before and after)"
    _compare(run, second, chain, lambda: (run.typed(first), run.typed(second)), x, names)


def _form(x: Any, s: Sample) -> Callable:
    """The sample's call on x, bound: its method where it has one, else its function."""
    if s.info.method_variant is not None:
        return method_of(x, s.info.method_variant)
    return lambda *args, **kwargs: s.info.op(x, *args, **kwargs)


def _compare(
    run: Run, s: Sample, fn: Callable, inputs: Callable[[], tuple], x: Any, chain: str
) -> None:
    """fn compiled (afresh) equals fn in eager on fresh inputs: values (the sample's
    tolerance), the run's rule, and each result's attributes (metadata) as eager's."""
    prefix = f"{chain}: " if chain else ""
    try:
        want = seeded(lambda: fn(*inputs()))
    except Exception:  # eager refuses: the values check reports it where it matters
        return
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    arguments = inputs()
    try:
        got = seeded(lambda: compiled(*arguments))
    except Exception as err:
        first_line = str(err).splitlines()[0] if str(err) else ""
        run.fail("compile", s, f"{prefix}raised {type(err).__name__}: {first_line}")
        return
    got_values, want_values = run.plain(got), run.plain(want)
    if s.name in UNDEFINED_VALUES and not chain:  # uninitialised memory: dtype and shape
        got_values, want_values = result_tensors(got_values), result_tensors(want_values)
        want_values = [
            w.copy_(g) if g.shape == w.shape and g.dtype == w.dtype else w
            for g, w in zip(got_values, want_values)
        ]
    reason = (
        compare_results(got_values, want_values, exact=False)
        or run.type_problem(x, got)
        or _attributes_differ(got, want)
    )
    if reason:
        run.fail("compile", s, prefix + reason)


def _attributes_differ(got: Any, want: Any) -> str:
    """'' when each result tensor has eager's type and attributes (metadata and the
    like), else what differs."""
    for i, (g, w) in enumerate(zip(result_tensors(got), result_tensors(want))):
        if type(g) is not type(w):
            return f"result {i} is a {type(g).__name__}, in eager a {type(w).__name__}"
        differs = _state_differs(g, w)
        if differs:
            return f"result {i}: {differs} (eager)"
    return ""
