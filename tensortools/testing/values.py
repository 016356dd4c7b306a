"""The ``values`` and ``types`` checks: a sample on the type equals the plain run (its
in-place form has the same effect), and its results follow the type's rule."""

from __future__ import annotations

from tensortools.coverage.samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.run import Run, method_of, result_tensors
from tensortools.testing.samples import Sample

__all__ = ["check_in_place", "check_values_and_types"]


def check_values_and_types(run: Run, s: Sample, checks: tuple[str, ...]) -> None:
    fn = s.info.op
    x, plain = run.typed(s), run.stands_for(s)
    if x is None:
        return
    try:
        want = seeded(lambda: run.want(fn, s, plain))
    except Exception:
        return  # the plain call refuses the sample: nothing to compare
    try:
        got = seeded(lambda: fn(x, *s.args, **s.kwargs))
    except Exception as err:
        if run.refused_call(err):
            run.refuse("values", s, err)
        else:
            run.fail("values", s, f"raised {type(err).__name__}: {err}")
        return
    if "values" in checks:
        values = run.plain(got)
        if s.name in UNDEFINED_VALUES:  # uninitialised memory: dtype and shape only
            values, want = result_tensors(values), result_tensors(want)
            want = [w.copy_(g) if g.shape == w.shape else w for g, w in zip(values, want)]
        reason = compare_results(values, want, exact=False)
        if reason:
            run.fail("values", s, reason)
        check_in_place(run, s)
    if "types" in checks:
        problem = run.type_problem(x, got)
        if problem:
            run.fail("types", s, problem)


def check_in_place(run: Run, s: Sample) -> None:
    variant = s.info.inplace_variant
    if variant is None:
        return
    x, plain = run.typed(s), run.stands_for(s)
    try:
        seeded(lambda: variant(plain, *s.args, **s.kwargs))
    except Exception:
        return
    try:
        returned = seeded(lambda: method_of(x, variant)(*s.args, **s.kwargs))
    except Exception as err:
        if run.refused_call(err):
            run.refuse("values", s, err)
        else:
            run.fail("values", s, f"in-place form raised {type(err).__name__}: {err}")
        return
    reason = compare_results(run.plain(x), plain, exact=False)
    if reason:
        run.fail("values", s, "in-place form: " + reason)
    elif returned is not x:
        run.fail("values", s, f"in-place form returned a new {type(returned).__name__}")
