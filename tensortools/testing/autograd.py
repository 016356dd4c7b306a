"""The ``autograd`` check: the input's gradient through the type equals the plain one,
and ``torch.autograd.gradcheck`` passes through the type in float64."""

from __future__ import annotations

import torch
from torch import Tensor

from tensortools.coverage.samples import compare_results, seeded
from tensortools.testing.run import Run, result_tensors
from tensortools.testing.samples import Sample

__all__ = ["check_autograd", "check_gradcheck"]


def check_autograd(run: Run, s: Sample, gradcheck: bool) -> None:
    if run.structured:  # the instance's gradient is not the dense tensor's
        return
    if not (s.info.supports_autograd and s.input.dtype.is_floating_point):
        return
    plain = run.stands_for(s)
    if plain is None:
        return
    plain.requires_grad_()
    try:
        want_out = [
            t for t in result_tensors(seeded(lambda: s.info.op(plain, *s.args, **s.kwargs)))
        ]
        want_out = [t for t in want_out if t.requires_grad]
        if not want_out:
            return
        weights = [torch.randn_like(t) for t in want_out]
        (want,) = torch.autograd.grad(_weighted_sum(want_out, weights), plain, allow_unused=True)
    except Exception:
        return
    x = run.make(s.input.detach().clone())
    if x is None:
        return
    try:
        x.requires_grad_()
        got_out = [t for t in result_tensors(seeded(lambda: s.info.op(x, *s.args, **s.kwargs)))]
        got_out = [t for t in got_out if t.requires_grad]
        if len(got_out) != len(want_out):
            run.fail(
                "autograd",
                s,
                f"{len(got_out)} results require grad where the plain run has {len(want_out)}",
            )
            return
        (got,) = torch.autograd.grad(
            _weighted_sum([run.plain(t) for t in got_out], weights), x, allow_unused=True
        )
    except Exception as err:
        run.fail("autograd", s, f"backward raised {type(err).__name__}: {err}")
        return
    if want is None or got is None:
        if (want is None) != (got is None):
            run.fail("autograd", s, f"gradient {got!r} where the plain run gives {want!r}")
        return
    reason = compare_results(run.plain(got), want, exact=False)
    if reason:
        run.fail("autograd", s, "gradient: " + reason)
    if gradcheck:
        check_gradcheck(run, s)


def check_gradcheck(run: Run, s: Sample) -> None:
    """gradcheck through the type on the function's first float64 sample, where the
    plain function passes gradcheck on it (op_db's own float64 samples: converting a
    float32 one can make it invalid, e.g. no longer positive definite)."""
    try:
        sample = next(iter(s.info.sample_inputs("cpu", torch.float64)))
    except Exception:
        return
    if not isinstance(sample.input, Tensor) or sample.input.layout != torch.strided:
        return
    x64 = sample.input.detach().clone().requires_grad_()
    args, kwargs = tuple(sample.args), dict(sample.kwargs)

    def outputs(t):
        return tuple(
            t for t in result_tensors(s.info.op(t, *args, **kwargs)) if t.is_floating_point()
        )

    try:
        if not torch.autograd.gradcheck(outputs, (x64,), raise_exception=False, fast_mode=True):
            return  # the plain function does not pass it on this sample either
    except Exception:
        return

    def through_type(t):
        return tuple(run.plain(o) for o in outputs(run.make(t)))

    try:
        torch.autograd.gradcheck(through_type, (x64,), raise_exception=True, fast_mode=True)
    except Exception as err:
        run.fail("autograd", s, f"gradcheck (float64): {str(err).splitlines()[0]}")


def _weighted_sum(outs: list[Tensor], weights: list[Tensor]) -> Tensor:
    return sum((o.as_subclass(Tensor) * w).sum() for o, w in zip(outs, weights))
