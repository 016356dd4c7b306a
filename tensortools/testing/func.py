"""The ``func`` check: torch.func's ``grad`` and ``vmap`` of a function of one instance
give what they give for the plain tensor the instance stands for.

A user meets the transforms with a type in two ways, and each function's first sample
whose input is one floating-point instance runs both:

- the instance is the transformed argument (``vmap(f)(x)`` over a batch held in the type,
  ``grad(f)(x)``). torch.func works below ``__torch_function__``: it unwraps a
  ``torch.Tensor`` subclass, so the function sees plain tensors and the results are plain
  (as MetadataTensor documents); a tensor-like that is no ``torch.Tensor`` (ScalarTensor)
  is not a transform's input at all (torch refuses it), so this form runs only for
  subclasses, and not for a ``(make, densify)`` type, whose instance's gradient is not
  the dense tensor's;
- the instance is captured by a function of a plain tensor that is transformed
  (``vmap(lambda y: f(x * y))(ys)``, ``grad(lambda y: loss(f(x * y)))(y)``: a fixed weight
  of the type in per-sample work). Here the type's handlers receive torch.func's wrapped
  tensors, which have no storage, no ``.item()`` and no value to branch on.

Results are compared with the same transform of the plain function; each tensor of them
is plain or of the type and following its rule. A transform the plain function does not
pass (no batching rule that runs, random functions under ``vmap``, no derivative) is not
judged."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.report import Unsupported
from tensortools.testing.run import Run, first_instance, result_tensors
from tensortools.testing.samples import Sample

__all__ = ["check_func"]


def check_func(run: Run, s: Sample) -> None:
    """grad and vmap over the instance (subclasses) and with the instance captured (every
    type), against the plain function's, on the function's first sample whose input
    alone is an instance. (vmap's note that an operator has no batching rule of its own,
    a warning per call, is held back: it is about speed, and the check is about values.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "There is a performance drop because we have not")
        _check_func(run, s)


def _check_func(run: Run, s: Sample) -> None:
    if s.name in UNDEFINED_VALUES or not isinstance(s.input, Tensor) or s.picks != (0,):
        return
    if not s.input.is_floating_point():
        return
    done = vars(run).setdefault("func_done", set())  # (the first such sample of each)
    typed = run.typed_call(s)
    if s.name in done or typed is None or not isinstance(typed[0], run.cls):
        return
    done.add(s.name)
    x, args, kwargs = typed
    p, plain_args, plain_kwargs = run.plain_call(typed)

    def typed_fn(v: Any) -> Any:
        return s.info.op(v, *args, **kwargs)

    def plain_fn(v: Tensor) -> Any:
        return run.want(s.info.op, (v, plain_args, plain_kwargs))

    def differentiable(result: Any) -> list[Tensor]:
        # (dense, as run.plain gives every result: a sparse one's weight would be sparse)
        return [t for t in result_tensors(run.plain(result)) if t.is_floating_point()]

    try:
        weights = [torch.randn_like(t) for t in differentiable(seeded(lambda: plain_fn(p)))]
    except Exception:
        return

    def loss(fn: Callable[[Any], Any]) -> Callable[[Any], Tensor]:
        def value(v: Any) -> Tensor:
            got = differentiable(fn(v))
            return sum(((t * w).sum() for t, w in zip(got, weights)), p.new_zeros(()))

        return value

    ys = torch.tensor([1.0, 0.5], dtype=p.dtype)
    transforms: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = []
    # (the instance each transform's calls take, where not x: the rule judges results
    # against the instance they came from)
    inputs: dict[str, Any] = {}
    if isinstance(x, Tensor) and not run.structured:
        batch = torch.stack([p, 0.5 * p])

        def vmap_over_instance() -> Any:
            inputs["vmap over the instance"] = stacked = run.make(batch.clone())
            return torch.func.vmap(typed_fn)(stacked)

        transforms.append(
            (
                "vmap over the instance",
                vmap_over_instance,
                lambda: torch.func.vmap(plain_fn)(batch),
            )
        )
        if s.info.supports_autograd:
            transforms.append(
                (
                    "grad over the instance",
                    lambda: torch.func.grad(loss(typed_fn))(x),
                    lambda: torch.func.grad(loss(plain_fn))(p),
                )
            )
    transforms.append(
        (
            "vmap with the instance captured",
            lambda: torch.func.vmap(lambda y: typed_fn(x * y))(ys),
            lambda: torch.func.vmap(lambda y: plain_fn(p * y))(ys),
        )
    )
    if s.info.supports_autograd:
        transforms.append(
            (
                "grad with the instance captured",
                lambda: torch.func.grad(loss(lambda y: typed_fn(x * y)))(ys[0]),
                lambda: torch.func.grad(loss(lambda y: plain_fn(p * y)))(ys[0]),
            )
        )
    for what, on_type, on_plain in transforms:
        try:
            want = seeded(on_plain)
        except Exception:
            continue  # torch.func does not take the plain function this way either
        try:
            got = seeded(on_type)
        except Unsupported:
            continue  # (make declines the batch: a shape the type does not hold)
        except Exception as err:
            run.raised("func", s, err, f"{what}:")
            continue
        reason = compare_results(run.plain(got), want, exact=False) or _kind_problem(
            run, inputs.get(what, x), got
        )
        if reason:
            run.fail("func", s, f"{what}: {reason}")


def _kind_problem(run: Run, x: Any, result: Any) -> str:
    """What is wrong with the kinds of a transform's results: each a plain tensor (what
    torch.func returns) or an instance of the type that follows its rule."""
    for t in result_tensors(result):
        if type(t) is Tensor:
            continue
        if not isinstance(t, run.cls):
            return f"a {type(t).__name__} result, neither plain nor a {run.cls.__name__}"
        problem = run.type_problem(first_instance(run.cls, x), t)
        if problem:
            return problem
    return ""
