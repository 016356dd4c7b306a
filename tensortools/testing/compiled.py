"""The ``compile`` check: a sample under ``torch.compile`` (each of the run's backends:
``eager`` and ``aot_eager`` by default, ``inductor`` on request) equals the eager call,
alone and chained with other calls in one compiled function.

Chains matter because of a hazard of torch.compile itself: where a type's
``__torch_function__`` breaks the graph, dynamo may run code it compiled for an earlier
call of the same compiled function in place of a later one (on MONAI's MetaTensor,
``(x + 0.5) * 2 - x / 3`` ran ``+ 0.5`` as ``* 0.5``). A function compiled alone never
shows it."""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.report import Failure
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
        _compare(run, s, call, (x,), x, "")


def _check_arithmetic(run: Run, s: Sample) -> bool:
    """The arithmetic chain on instances made from the sample's input; False where it
    has none that the chain can take."""
    if not isinstance(s.input, torch.Tensor) or not s.input.is_floating_point():
        return False
    x = run.typed(s)
    y = run.instance(s.input.detach().clone() * 0.5 + 1, s) if x is not None else None
    if y is None:
        return False
    try:
        seeded(lambda: arithmetic_chain(x, y))
    except Exception:  # the type refuses the arithmetic itself: not compile's to judge
        return False
    chain = "chained (x + 0.5) * 2 - x / 3, x.add(0.5).mul(2).sub(x.div(3)), x + y, x * y, 1.5 - x"
    _compare(run, s, arithmetic_chain, (x, y), x, chain)
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

    x, y = run.typed(second), run.typed(first)
    if x is None or y is None:
        return
    names = f"chained with {first.name} (before and after)"
    _compare(run, second, chain, (y, x), x, names)


def _form(x: Any, s: Sample) -> Callable:
    """The sample's call on x, bound: its method where it has one, else its function."""
    if s.info.method_variant is not None:
        return method_of(x, s.info.method_variant)
    return lambda *args, **kwargs: s.info.op(x, *args, **kwargs)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.compile's logs and warnings held back (a graph break or a failed compile
    writes pages of them to stderr): the check reports what went wrong in one line."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def real_message(err: BaseException) -> str:
    """The exception that torch.compile's wrappers hide (its innermost cause), in one
    line: ``Type: message``, prefixed by the wrapper's type where there is one."""
    inner, seen = err, {id(err)}
    while True:
        nxt = getattr(inner, "inner_exception", None) or inner.__cause__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    text = str(inner).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    where = "" if inner is err else f"{type(err).__name__} from "
    return f"{where}{type(inner).__name__}: {line}"


def _changes_inputs(s: Sample) -> bool:
    return s.name.endswith("_") or "out" in s.kwargs or bool(s.kwargs.get("inplace"))


def _compare(run: Run, s: Sample, fn: Callable, arguments: tuple, x: Any, chain: str) -> None:
    """fn compiled (afresh, by each of the run's backends) equals fn in eager on the
    same instances (made once: `make` may draw random state, and an instance's own
    state must match its own), or on copies of them where the call changes its inputs:
    values (the sample's tolerance), the run's rule, and each result's attributes
    (metadata) as eager's."""
    prefix = f"{chain}: " if chain else ""
    spare = _copy(arguments)
    before = _values(run, arguments)
    try:
        want = seeded(lambda: fn(*arguments))
    except Exception:  # eager refuses: the values check reports it where it matters
        return
    # (a call that changes its inputs: each compiled run gets a copy of them as they were)
    changed = _changes_inputs(s) or compare_results(_values(run, arguments), before, True)
    if changed and spare is None:
        return
    for backend in run.compile_backends:
        under = "" if backend == "eager" else f"under backend {backend}: "
        inputs = _copy(spare) if changed else arguments
        with _quiet():
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend=backend)
            try:
                got = seeded(lambda: compiled(*inputs))
            except Exception as err:
                reason = f"{prefix}{under}raised {real_message(err)}"
                if backend != "eager" and _bare_subclass_fails(run, fn, inputs, backend):
                    run.upstream.append(_upstream(s, reason))
                else:
                    run.fail("compile", s, reason)
                continue
        got_values, want_values = run.plain(got), run.plain(want)
        if s.name in UNDEFINED_VALUES and not chain:  # uninitialised memory: dtype and shape
            got_values, want_values = result_tensors(got_values), result_tensors(want_values)
            want_values = [
                w.clone().copy_(g) if g.shape == w.shape and g.dtype == w.dtype else w
                for g, w in zip(got_values, want_values)
            ]
        reason = (
            compare_results(got_values, want_values, exact=False)
            or run.type_problem(x, got)
            or _attributes_differ(run, got, want)
        )
        if reason:
            run.fail("compile", s, prefix + under + reason)


class _Bare(torch.Tensor):
    """A torch.Tensor subclass with nothing of its own."""


def _bare_subclass_fails(run: Run, fn: Callable, inputs: tuple, backend: str) -> bool:
    """Whether fn compiled by `backend` raises for the instances' plain values as a bare
    Tensor subclass too: then the failure is torch's (with torch 2.13, aot_eager fails
    every call of any subclass), not the type's."""

    def bare(x: Any) -> Any:
        return run.plain(x).as_subclass(_Bare) if isinstance(x, run.cls) else x

    torch._dynamo.reset()
    try:
        seeded(lambda: torch.compile(fn, backend=backend)(*tree_map(bare, inputs)))
    except Exception:
        return True
    return False


def _upstream(s: Sample, reason: str) -> Failure:
    return Failure("compile", s.name, s.label, f"{reason} (a bare Tensor subclass too)"[:300])


def _values(run: Run, arguments: tuple) -> list:
    return [t.detach().clone() for t in result_tensors(run.plain(arguments))]


def _copy(arguments: tuple) -> tuple | None:
    try:
        return copy.deepcopy(arguments)
    except Exception:
        return None


def _attributes_differ(run: Run, got: Any, want: Any) -> str:
    """'' when each result tensor has eager's type and attributes (metadata and the
    like), else what differs."""
    for i, (g, w) in enumerate(zip(result_tensors(got), result_tensors(want))):
        if type(g) is not type(w):
            return f"result {i} is a {type(g).__name__}, in eager a {type(w).__name__}"
        differs = _state_differs(g, w, run.volatile_attrs)
        if differs:
            return f"result {i}: {differs} (eager)"
    return ""
