"""The ``compile`` check: a sample under ``torch.compile`` (the eager backend) equals the
eager call."""

from __future__ import annotations

import torch

from tensortools.coverage.samples import compare_results, seeded
from tensortools.testing.run import Run
from tensortools.testing.samples import Sample

__all__ = ["check_compile"]


def check_compile(run: Run, s: Sample) -> None:
    try:
        want = run.plain(seeded(lambda: s.info.op(run.typed(s), *s.args, **s.kwargs)))
    except Exception:
        return
    torch._dynamo.reset()
    fn = torch.compile(lambda t: s.info.op(t, *s.args, **s.kwargs), backend="eager")
    x = run.typed(s)
    try:
        got = seeded(lambda: fn(x))
    except Exception as err:
        run.fail("compile", s, f"raised {type(err).__name__}: {str(err).splitlines()[0]}")
        return
    reason = compare_results(run.plain(got), want, exact=False) or run.type_problem(x, got)
    if reason:
        run.fail("compile", s, reason)
