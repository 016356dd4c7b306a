"""The ``autograd`` check: the gradients of the instances through the type equal the
plain ones, and ``torch.autograd.gradcheck`` passes through the type in float64."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from tensortools._samples import compare_results, seeded
from tensortools.testing.report import Unsupported
from tensortools.testing.run import Run, result_tensors
from tensortools.testing.samples import Sample, generated

__all__ = ["check_autograd", "check_gradcheck"]


def check_autograd(run: Run, s: Sample, gradcheck: bool) -> None:
    """The gradient of a weighted sum of the results with respect to each instance of
    the call (every tensor of an input list, where they are instances) against the plain
    call's."""
    if run.structured:  # the instance's gradient is not the dense tensor's
        return
    typed = run.typed_call(s)
    if not s.info.supports_autograd or typed is None:
        return
    plain = run.plain_call(typed)
    slots = _instance_slots(run, typed)
    if not slots:
        return
    plain_leaves, spec = tree_flatten(plain)
    plain_inputs = [plain_leaves[k].requires_grad_() for k in slots]
    try:
        inp, args, kwargs = tree_unflatten(plain_leaves, spec)
        want_out = result_tensors(seeded(lambda: s.info.op(inp, *args, **kwargs)))
        want_out = [t for t in want_out if t.requires_grad]
        if not want_out:
            return
        weights = [torch.randn_like(t) for t in want_out]
        want = torch.autograd.grad(
            _weighted_sum(want_out, weights), plain_inputs, allow_unused=True
        )
    except Exception:
        return
    typed_leaves, spec = tree_flatten(typed)
    try:
        typed_inputs = [typed_leaves[k].requires_grad_() for k in slots]
        inp, args, kwargs = tree_unflatten(typed_leaves, spec)
        got_out = result_tensors(seeded(lambda: s.info.op(inp, *args, **kwargs)))
        got_out = [t for t in got_out if t.requires_grad]
        if len(got_out) != len(want_out):
            run.fail(
                "autograd",
                s,
                f"{len(got_out)} results require grad where the plain run has {len(want_out)}",
            )
            return
        got = torch.autograd.grad(
            _weighted_sum([run.plain(t) for t in got_out], weights), typed_inputs, allow_unused=True
        )
    except Exception as err:
        run.fail("autograd", s, f"backward raised {type(err).__name__}: {err}")
        return
    for k, (g, w) in enumerate(zip(got, want)):
        which = "gradient" if len(slots) == 1 else f"gradient of instance {k}"
        if w is None or g is None:
            if (w is None) != (g is None):
                run.fail("autograd", s, f"{which} {g!r} where the plain run gives {w!r}")
            continue
        reason = compare_results(run.plain(g), w, exact=False)
        if reason:
            run.fail("autograd", s, f"{which}: {reason}")
    if gradcheck:
        check_gradcheck(run, s)


def _instance_slots(run: Run, typed: tuple) -> list[int]:
    """The positions of the call's floating-point instances (those with a gradient)."""
    leaves, _ = tree_flatten(typed)
    return [
        k
        for k, x in enumerate(leaves)
        if isinstance(x, run.cls) and getattr(x, "dtype", torch.int64).is_floating_point
    ]


#: gradcheck's inputs at most this many values: its finite differences grow with them
#: (nn.functional.ctc_loss's 16,000 took 80 s per gradcheck on the 2-core machine, with
#: every other function a few seconds in all); the gradients of larger inputs are still
#: compared with the plain call's by check_autograd.
GRADCHECK_MAX_VALUES = 4096


def check_gradcheck(run: Run, s: Sample) -> None:
    """gradcheck through the type on the function's first float64 sample, once per
    function, where the plain function passes gradcheck on it (op_db's own float64
    samples: converting a float32 one can make it invalid, e.g. no longer positive
    definite) and its input holds at most GRADCHECK_MAX_VALUES values. The tensors of
    the input (the input, or each tensor of an input list) are the ones checked, each
    made an instance."""
    done = vars(run).setdefault("gradcheck_done", set())
    if s.name in done:
        return
    done.add(s.name)
    try:
        (sample,) = generated(s.info, torch.float64, 1)
    except Exception:
        return
    leaves, spec = tree_flatten(sample.input)
    if not leaves or not all(isinstance(t, Tensor) and t.layout == torch.strided for t in leaves):
        return
    if sum(t.numel() for t in leaves) > GRADCHECK_MAX_VALUES:
        return
    inputs = tuple(t.detach().clone().requires_grad_() for t in leaves)
    args, kwargs = tuple(sample.args), dict(sample.kwargs)

    def outputs(*ts):
        result = s.info.op(tree_unflatten(list(ts), spec), *args, **kwargs)
        return tuple(t for t in result_tensors(result) if t.is_floating_point())

    # (made once, outside gradcheck's calls: each tensor as an instance where make gives
    # one, else plain; an instance stands for its tensor, so gradcheck's perturbed inputs
    # reach it through make again, which may decline them alike)
    made = [run.instance(t.detach(), s) for t in inputs]
    if all(x is None for x in made):
        return  # no instance of this sample's float64 tensors: nothing of the type to check

    def through_type(*ts):
        typed = [t if x is None else _or(run.make(t), t) for t, x in zip(ts, made)]
        return tuple(run.plain(o) for o in outputs(*typed))

    def gradcheck(fn, raise_exception):
        return seeded(
            lambda: torch.autograd.gradcheck(
                fn, inputs, raise_exception=raise_exception, fast_mode=True
            )
        )

    try:
        gradcheck(through_type, raise_exception=True)
    except Unsupported as err:
        # (make declines the tensors gradcheck passes, which require grad: a type that
        # holds no such tensor, as tensordict's MemoryMappedTensor; not a failure)
        run.decline(s, f"gradcheck: {err}")
    except Exception as err:
        # (the plain function's gradcheck runs only here: a failure counts where the
        # plain function passes it on this sample)
        try:
            if not gradcheck(outputs, raise_exception=False):
                return
        except Exception:
            return
        run.fail("autograd", s, f"gradcheck (float64): {str(err).splitlines()[0]}")


def _or(x, t):
    return t if x is None else x


def _weighted_sum(outs: list[Tensor], weights: list[Tensor]) -> Tensor:
    return sum((o.as_subclass(Tensor) * w).sum() for o, w in zip(outs, weights))
