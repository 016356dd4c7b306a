"""The ``aliases`` check: the method, operator and reflected-operator forms of a call on
the type agree with the same forms on the plain tensor."""

from __future__ import annotations

from tensortools.coverage.samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.run import Run, method_of
from tensortools.testing.samples import Sample

__all__ = ["check_aliases"]


def check_aliases(run: Run, s: Sample) -> None:
    """Each other form of the call, on the type, against the same form on the plain
    tensor (so a form is checked even where the function form was refused)."""
    forms = {}
    if s.info.method_variant is not None:
        forms["method"] = lambda x: method_of(x, s.info.method_variant)(*s.args, **s.kwargs)
    op = s.info.operator_variant
    if op is not None and len(s.args) == 1 and not s.kwargs:
        other = s.args[0]
        forms["operator"] = lambda x: op(x, other)
        # number <op> x: Python asks the number first, then x's reflected method
        forms["reflected operator"] = lambda x: op(1.5, x)
    for form, call in forms.items():
        try:  # the plain tensor's answer; none where it has no such form either
            expected = seeded(lambda: call(run.stands_for(s)))
        except Exception:
            continue
        x = run.typed(s)
        try:
            got = seeded(lambda: call(x))
        except Exception as err:
            if form == "method" and run.refused_call(err):
                run.refuse("aliases", s, err)
            else:
                run.fail("aliases", s, f"{form} form raised {type(err).__name__}: {err}")
            continue
        # (uninitialised memory: only the rule, no values)
        same = (
            "" if s.name in UNDEFINED_VALUES else compare_results(run.plain(got), expected, False)
        )
        problem = same or run.type_problem(x, got)
        if problem:
            run.fail("aliases", s, f"{form} form: {problem}")
