"""The ``binding`` check: a call whose positional arguments are passed by torch's names
(``torch.linalg.det(A=x)``, ``torch.sum(x, dim=0)``) or by the NumPy-style aliases torch
accepts (``x=``, ``axis=``, ``keepdims=``) gives on the type what the positional call gives.

The names are found by asking torch: a name is torch's for a position where the plain
call with the argument passed by it gives the positional call's answer. So the check
does not trust the table of names the dispatch base binds with
(:mod:`tensortools.dispatch.binding`), whose candidates it only borrows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.dispatch.binding import torch_positions
from tensortools.testing.run import Run, method_of
from tensortools.testing.samples import Sample

__all__ = ["check_binding", "keyword_forms"]

_ALIASES = {"input": ("x", "a", "x1"), "dim": ("axis",), "keepdim": ("keepdims",), "other": ("x2",)}


def _agrees(call: Callable[[], Any], want: Any) -> bool:
    try:
        got = seeded(call)
    except Exception:
        return False
    return not compare_results(got, want, exact=False)


def keyword_forms(
    fn: Callable, first: int, arguments: list, kwargs: dict, want: Any
) -> list[tuple[str, tuple, dict]]:
    """The forms of ``fn(*arguments, **kwargs)`` (on plain tensors, answering `want`) that
    pass the arguments from position ``k`` on by torch's names, for each ``k >= first``
    down from the last, then with the NumPy aliases: ``(label, args, kwargs)``."""
    positions = torch_positions(fn)
    candidates = sorted(positions.names | set(positions.index))
    forms: list[tuple[str, tuple, dict]] = []
    named: dict[str, Any] = {}
    for i in range(len(arguments) - 1, first - 1, -1):
        found = None
        for name in candidates:
            if name in named or name in kwargs:
                continue
            trial = {name: arguments[i], **named, **kwargs}
            if _agrees(lambda t=trial: fn(*arguments[:i], **t), want):
                found = name
                break
        if found is None:
            break
        named = {found: arguments[i], **named}
        forms.append((f"by keyword from position {i}", tuple(arguments[:i]), {**named, **kwargs}))
    if forms and positions.parsed:
        args, keywords = forms[-1][1], forms[-1][2]
        for name, aliases in _ALIASES.items():
            for alias in aliases:
                if name in keywords and alias not in positions.names:
                    trial = {(alias if k == name else k): v for k, v in keywords.items()}
                    if _agrees(lambda t=trial: fn(*args, **t), want):
                        forms.append((f"alias {alias}= for {name}=", args, trial))
                        break
    return forms


def _state(run: Run, obj: Any) -> list:
    leaves = tree_leaves(obj, is_leaf=lambda x: isinstance(x, torch.Size))
    return [run.state(t) for t in leaves if isinstance(t, run.cls)]


def _state_differs(run: Run, got: Any, positional: Any) -> str:
    """What the type carries beside the values (an instance's attributes: metadata, a
    batch's samples) in the keyword form's results, against the positional form's."""
    try:
        same = _state(run, got) == _state(run, positional)
    except Exception:  # (attributes that cannot be compared: only the values are)
        return ""
    return "" if same else "its results carry other attributes than the positional call's"


def check_binding(run: Run, s: Sample) -> None:
    """The function and method forms of the sample with positional arguments by name,
    each against the same form called positionally (the method form as user code calls
    it, bound: ``x.chunk(2)`` against ``x.chunk(chunks=2)``, since a type may override
    the method in Python, a path the unbound ``torch.Tensor.chunk(x, 2)`` never takes)."""
    x = run.typed(s)
    if x is None:
        return
    plain = run.plain_call((x, (), {}))[0]
    forms = {"function": (s.info.op, 0)}
    if s.info.method_variant is not None:
        forms["method"] = (s.info.method_variant, 1)
    for form, (fn, first) in forms.items():
        bound = method_of(x, fn) if form == "method" else None
        try:
            want = seeded(lambda: fn(plain, *s.args, **s.kwargs))
            if bound is not None:
                positional = seeded(lambda: bound(*s.args, **s.kwargs))
            else:
                positional = seeded(lambda: fn(x, *s.args, **s.kwargs))
        except Exception:
            continue  # refused positionally: the values check reports that
        if s.name in UNDEFINED_VALUES:
            continue  # (uninitialised memory: nothing to compare)
        for label, args, kwargs in keyword_forms(fn, first, [plain, *s.args], s.kwargs, want):
            typed_args = (x, *args[1:]) if args else ()
            typed_kwargs = {k: (x if v is plain else v) for k, v in kwargs.items()}
            call = fn
            if bound is not None:  # (how user code calls it: x.sum(dim=0))
                call, typed_args = bound, typed_args[1:]
            try:
                got = seeded(lambda: call(*typed_args, **typed_kwargs))
            except Exception as err:
                run.fail("binding", s, f"{form} form {label}: raised {type(err).__name__}: {err}")
                continue
            reason = compare_results(run.plain(got), want, exact=False)
            if not reason and not run.type_problem(x, positional, s.info.op, (x, s.args, s.kwargs)):
                problem = run.type_problem(x, got, s.info.op, (x, s.args, s.kwargs))
                reason = problem and f"its result: {problem}"
            reason = reason or _state_differs(run, got, positional)
            if reason:
                run.fail("binding", s, f"{form} form {label}: {reason}")
