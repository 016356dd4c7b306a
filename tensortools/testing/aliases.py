"""The ``aliases`` check: the method, operator and reflected-operator forms of a call on
the type, and the method's varargs spelling (``x.flip(0, 1)``, ``x.permute(2, 0, 1)``),
agree with the same forms on the plain tensor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.run import Run, method_of
from tensortools.testing.samples import Sample

__all__ = ["check_aliases", "varargs"]


def varargs(args: tuple, kwargs: dict) -> tuple | None:
    """The varargs spelling of a method call whose one argument (by position or by
    name) is a sequence of ints (``x.flip((0, 1))`` or ``x.flip(dims=(0, 1))`` as
    ``x.flip(0, 1)``); None where the call has no such spelling."""
    if len(args) + len(kwargs) != 1:
        return None
    (arg,) = (*args, *kwargs.values())
    if not isinstance(arg, (tuple, list, torch.Size)) or not arg:
        return None
    return tuple(arg) if all(type(a) is int for a in arg) else None


def check_aliases(run: Run, s: Sample) -> None:
    """Each other form of the call, on the type, against the same form on the plain
    tensor (so a form is checked even where the function form was refused). The forms
    are methods and operators of the input: none for an input list, and none where the
    input is a plain tensor (its own methods are not the type's; the other instances
    reach the type through the function form alike)."""
    forms: dict[str, Callable[[Any, tuple, dict], Any]] = {}
    variant = s.info.method_variant
    if variant is not None:
        forms["method"] = lambda x, a, k: method_of(x, variant)(*a, **k)
        if varargs(s.args, s.kwargs) is not None:
            forms["varargs method"] = lambda x, a, k: method_of(x, variant)(*varargs(a, k))
    op = s.info.operator_variant
    if op is not None and len(s.args) == 1 and not s.kwargs:
        forms["operator"] = lambda x, a, k: op(x, a[0])
        # number <op> x: Python asks the number first, then x's reflected method
        forms["reflected operator"] = lambda x, a, k: op(1.5, x)
    for form, call in forms.items():
        typed = run.typed_call(s)
        if typed is None or not isinstance(typed[0], run.cls):
            return
        try:  # the plain tensor's answer; none where it has no such form either
            expected = seeded(lambda: call(*run.plain_call(typed)))
        except Exception:
            continue
        try:
            got = seeded(lambda: call(*typed))
        except Exception as err:
            if form.endswith("method") and run.refused_call(err):
                run.refuse("aliases", s, err)
            else:
                run.fail("aliases", s, f"{form} form raised {type(err).__name__}: {err}")
            continue
        # (uninitialised memory: only the rule, no values)
        same = (
            "" if s.name in UNDEFINED_VALUES else compare_results(run.plain(got), expected, False)
        )
        problem = same or run.type_problem(typed, got, s.info.op, typed)
        if problem:
            run.fail("aliases", s, f"{form} form: {problem}")
