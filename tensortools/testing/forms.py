"""Forms of a call that op_db's samples never take, judged by the ``values``, ``types``
and ``mutation`` checks once per function (on its first sample that has the form and
whose plain call runs):

- an **empty** instance: each tensor of the call cut to size 0 along dim 0, a 0-d input
  as shape (0,) (an empty batch, a sequence of T = 0: the commonest edge);
- **Python numbers**: the tensors among the further arguments as Python numbers (their
  first element: ``clamp(x, -0.5, 0.8)``, ``x.mul(-1.7)``), as user code writes them
  (op_db's samples pass tensors there);
- the **out=** form: ``fn(x, ..., out=o)`` with ``o`` an instance made of a copy of the
  plain result; it returns ``o``, holding the plain ``out=`` call's values, and what it
  returns follows the type's rule as the out-of-place result does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_map, tree_map_only

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.mutation import check_mutation
from tensortools.testing.report import Unsupported
from tensortools.testing.run import Run, is_size, result_tensors
from tensortools.testing.samples import Sample, tensor_leaves
from tensortools.testing.values import check_values_and_types, own_rule_problem

__all__ = ["FORMS", "check_forms", "empty_form", "numbers_form"]

#: The forms, as failures' labels name them.
FORMS = ("empty", "numbers", "out=")


def check_forms(run: Run, s: Sample, checks: tuple[str, ...], done: dict[str, set]) -> None:
    """Each form of :data:`FORMS` not yet judged for s's function, on s (`done`: form ->
    the functions judged in it)."""
    steps: dict[str, Callable[[], bool]] = {
        "empty": lambda: _judged(run, empty_form(s), checks, tolerant=True),
        "numbers": lambda: _judged(run, numbers_form(s), checks),
        "out=": lambda: check_out_form(run, s, checks),
    }
    for form, step in steps.items():
        if s.name in done[form]:
            continue
        ran: list[bool] = []
        run.guarded("values", s, lambda: ran.append(step()))
        if ran and ran[0]:
            done[form].add(s.name)


#: Functions whose result on an empty input is uninitialised memory (``resize_`` grows
#: it): no empty form.
_UNDEFINED_WHEN_EMPTY = UNDEFINED_VALUES | {"resize_", "resize_as_"}


def empty_form(s: Sample) -> Sample | None:
    """s with each tensor of one dim or more cut to size 0 along dim 0, and a 0-d input
    as a tensor of shape (0,); None where its input is already empty."""
    if s.name in _UNDEFINED_WHEN_EMPTY:
        return None
    inputs = tensor_leaves(s.input)
    if not inputs or any(t.layout != torch.strided or t.numel() == 0 for t in inputs):
        return None

    def cut(t: Tensor, scalar: bool = False) -> Tensor:
        if t.layout != torch.strided:  # (a sparse argument stays: the plain call decides)
            return t
        if t.dim() == 0:
            return t.reshape(1)[:0] if scalar else t
        return t[:0]

    inp = tree_map_only(Tensor, lambda t: cut(t, scalar=True), s.input)
    args, kwargs = tree_map_only(Tensor, cut, (s.args, s.kwargs), is_leaf=is_size)
    return dataclasses.replace(
        s, input=inp, args=tuple(args), kwargs=kwargs, variant="empty: dim 0 of size 0"
    )


def numbers_form(s: Sample) -> Sample | None:
    """s with the tensors among its further arguments (not the input) as Python numbers
    (each its first element), the instances it picks in the input kept; None where the
    further arguments hold no tensor or the sample picks no tensor of the input."""
    n_input = len(tensor_leaves(s.input))
    picks = tuple(k for k in s.picks if k < n_input)
    rest = (s.args, s.kwargs)
    if not picks or not any(t.numel() for t in tensor_leaves(rest)):
        return None
    args, kwargs = tree_map_only(Tensor, _number, rest, is_leaf=is_size)
    return dataclasses.replace(
        s,
        args=tuple(args),
        kwargs=kwargs,
        picks=picks,
        variant="further tensors as Python numbers",
    )


def _number(t: Tensor) -> Any:
    return t.flatten()[0].item() if t.layout == torch.strided and t.numel() else t


def _plain_runs(s: Sample) -> bool:
    """Whether the form's plain call runs (where it does not, there is nothing to judge)."""
    try:
        seeded(lambda: s.info.op(s.input, *s.args, **s.kwargs))
    except Exception:
        return False
    return True


def _judged(run: Run, s: Sample | None, checks: tuple[str, ...], tolerant: bool = False) -> bool:
    """The form s through the values and types checks (mutation watching them), or the
    mutation check alone; False where there is no form or its plain call refuses it. With
    `tolerant`, a make that raises on the form's tensors declines it (an empty tensor
    holds no first value to label it by): not a failure of make."""
    if s is None or not _plain_runs(s):
        return False
    make = run.make
    if tolerant:

        def declining(t: Tensor) -> Any:
            try:
                return make(t)
            except Unsupported:
                raise
            except Exception as err:
                raise Unsupported(f"make raised {type(err).__name__}: {err}") from err

        run.make = declining
    try:
        if {"values", "types"} & set(checks):
            check_values_and_types(run, s, checks)
        elif "mutation" in checks:
            check_mutation(run, s)
    finally:
        run.make = make
    return True


def check_out_form(run: Run, s: Sample, checks: tuple[str, ...]) -> bool:
    """The out= form of s's call against the plain one; False where the function takes
    no out= or the sample's call cannot be given one."""
    if not getattr(s.info, "supports_out", False) or "out" in s.kwargs:
        return False
    if not {"values", "types"} & set(checks):
        return False
    typed = run.typed_call(s)
    if typed is None:
        return False
    fn = s.info.op
    inp, args, kwargs = run.plain_call(typed)
    try:
        want = seeded(lambda: fn(inp, *args, **kwargs))
        if not result_tensors(want) or any(not isinstance(w, Tensor) for w in _flat(want)):
            return False
        plain_out = tree_map(lambda t: t.detach().clone(), want)
        plain_returned = seeded(lambda: fn(inp, *args, **kwargs, out=plain_out))
    except Exception:
        return False  # (the plain call takes no out= here)
    out = _instances(run, plain_out)
    if out is None:
        return False
    x, args, kwargs = typed
    try:
        got = seeded(lambda: fn(x, *args, **kwargs, out=out))
    except Exception as err:
        run.raised("values", s, err, "out= form")
        return True
    if "values" in checks:
        reason = compare_results(run.plain(out), plain_out, exact=False)
        if reason:
            run.fail("values", s, "out= form: " + reason)
        elif not _same_objects(got, out, plain_returned is None):
            run.fail("values", s, f"out= form returned a new {type(got).__name__}, not out")
    if "types" in checks:
        called = (x, args, {**kwargs, "out": out})  # (the rule is given the call as made)
        problem = run.type_problem(called, got, fn, called)
        problem = problem or own_rule_problem(run, s, typed, got, _out_again(run, plain_out, fn))
        if problem:
            run.fail("types", s, "out= form: " + problem)
    return True


def _flat(result: Any) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _instances(run: Run, plain_out: Any, make: Callable | None = None) -> Any:
    """Fresh instances of the out tensors (copies of the plain results), or None where
    make gives none for them (or declines or raises: the out= form is then not judged)."""
    make = make or run.make
    made = []

    def one(t: Tensor) -> Any:
        x = make(t.detach().clone())
        if x is None:
            return t.detach().clone()
        made.append(x)
        return x

    try:
        out = tree_map(one, plain_out)
    except Exception:
        return None
    return out if made else None


def _same_objects(got: Any, out: Any, none: bool) -> bool:
    """Whether the out= form returned its out (its tensors, where a tuple), as plain
    torch returns its own; None where plain torch returns None (`none`: the out= forms of
    functions giving a list, as ``unbind_copy``)."""
    if none:
        return got is None
    if not isinstance(out, (tuple, list)):
        return got is out
    if not isinstance(got, (tuple, list)) or len(got) != len(out):
        return False
    return all(g is o for g, o in zip(got, out))


def _out_again(run: Run, plain_out: Any, fn: Callable) -> Callable[..., Any]:
    """The out= call on the instances the type's coverage hooks make (for its own rule:
    see own_rule_problem), out made by the hooks' make too."""

    def again(x: Any, *args: Any, **kwargs: Any) -> Any:
        make = run.own_rule[0] if run.own_rule is not None else run.make
        out = _instances(run, plain_out, make)
        if out is None:
            raise TypeError("no out instance")  # (not judged)
        return fn(x, *args, **kwargs, out=out)

    return again
