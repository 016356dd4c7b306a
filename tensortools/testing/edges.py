"""The ``edges`` check: conditions of a call that op_db's samples never set, each compared
with the plain computation (PyTorch's issue 162964 asks for such an "OpInfo-like concept
for subclass edge conditions").

On each function's first sample: instances made of tensors that require grad (the
results' values, ``requires_grad`` and whether they have a ``grad_fn``, as plain);
calls under ``torch.inference_mode()``, on instances made outside and inside it (the
values, and which results are inference tensors, as plain); on each function's first
complex sample: instances made of tensors with the conjugate or negative bit set
(``t.conj()``, ``torch._neg_view(t)``), and the type's own ``x.conj()`` (the values as
those of the resolved tensor, and ``resolve_conj``/``resolve_neg`` of the results).
On a few fixed calls (:mod:`~tensortools.testing.edge_calls`): views that alias their
base, random functions, and calls mixed with a type that overrides nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.edge_calls import check_random, check_unknown_types, check_views
from tensortools.testing.report import Failure
from tensortools.testing.run import Run, is_size, result_tensors
from tensortools.testing.samples import Sample, op_samples, shaped, tensor_leaves

__all__ = ["EDGE_FUNCTIONS", "check_edges"]


#: The functions whose first sample the sample-based conditions run where the run names
#: no `ops` (where it does, they run on every function it names): the common calls of
#: each family, so that a default run stays about a second longer.
EDGE_FUNCTIONS = (
    *("add", "sub", "mul", "div", "pow", "matmul", "mm", "exp", "sin", "abs", "clamp"),
    *("sum", "mean", "var", "amax", "max", "sort", "cumsum", "softmax", "where"),
    *("cat", "stack", "split", "reshape", "view", "transpose", "t", "expand", "flip"),
    *("__getitem__", "index_select", "masked_fill", "contiguous", "clone", "to"),
    *("nn.functional.relu", "nn.functional.linear", "nn.functional.layer_norm"),
)


def check_edges(run: Run, samples: list[Sample], options: dict[str, Any]) -> None:
    """Every condition; the sample-based ones on the first sample of each function the
    run names in `ops` (of :data:`EDGE_FUNCTIONS` where it names none)."""
    wanted = None if options["ops_given"] else set(EDGE_FUNCTIONS)
    firsts: dict[str, Sample] = {}
    for s in samples:
        if (wanted is None or s.name in wanted) and s.name not in UNDEFINED_VALUES:
            firsts.setdefault(s.name, s)
    for s in firsts.values():
        run.guarded("edges", s, lambda s=s: _requires_grad(run, s))
        run.guarded("edges", s, lambda s=s: _inference(run, s, options["views_copy"]))
    for s in _complex_samples(sorted(firsts), options["dtypes"], options["samples"]):
        run.guarded("edges", s, lambda s=s: _conj_and_neg(run, s))
    views_copy = options["views_copy"]
    run.guarded("edges", None, lambda: check_views(run, options["dtypes"], views_copy))
    run.guarded("edges", None, lambda: check_random(run, options["dtypes"]))
    run.guarded("edges", None, lambda: check_unknown_types(run, options["dtypes"]))


def _as(s: Sample, condition: str) -> Sample:
    """s, its label naming the condition (failures and declines are of this variant)."""
    return dataclasses.replace(s, variant=f"{s.variant}, {condition}" if s.variant else condition)


def _calls(run: Run, s: Sample, typed: tuple, plain: tuple) -> tuple[Any, Any] | None:
    """(typed result, plain result) of s's function, each seeded; None where the plain
    call raises (nothing to compare) or the typed one does (a failure, or a refusal)."""
    fn = s.info.op
    try:
        want = seeded(lambda: run.want(fn, plain))
    except Exception:
        return None
    x, args, kwargs = typed
    try:
        got = seeded(lambda: fn(x, *args, **kwargs))
    except Exception as err:
        run.raised("edges", s, err)
        return None
    return got, want


# -- (a) instances of tensors that require grad --------------------------------------------


def _requires_grad(run: Run, s: Sample) -> None:
    s = _as(s, "made of tensors requiring grad")

    def form(t: Tensor) -> Tensor:
        return t.requires_grad_() if t.is_floating_point() or t.is_complex() else t

    typed = run.typed_call(s, form=form)
    if typed is None:
        return
    flags = [_requires(run, v) for v in _leaves(run, typed)]
    floating = [v for v in _leaves(run, typed) if _floats(run, v)]
    hidden = [v for v in floating if not _requires(run, v)]
    if any(_requires(run, run.densify(v)) for v in hidden):
        run.fail(
            "edges",
            s,
            "the instance does not require grad where the tensor it stands for (densify) "
            "does: gradients stop at it",
        )
        return
    if hidden or not floating:
        if hidden:
            run.decline(s, "make gave an instance that does not require grad of one that does")
        return
    plain = run.plain_call(typed)
    for t, flag in zip(_leaves(run, plain), flags):
        if flag:
            t.requires_grad_()
    found = _calls(run, s, typed, plain)
    if found is None:
        return
    got, want = found
    reason = compare_results(run.plain(got), want, exact=False)
    if reason:
        run.fail("edges", s, reason)
        return
    inputs = {id(t) for t in result_tensors(plain)}
    results = list(zip(result_tensors(got), result_tensors(want)))
    for k, (g, w) in enumerate(results):
        which = f"result {k}" if len(results) > 1 else "the result"
        if _requires(run, g) != w.requires_grad:
            run.fail(
                "edges",
                s,
                f"{which} requires grad: {not w.requires_grad} (plain's: {w.requires_grad})",
            )
        elif (
            isinstance(g, Tensor)
            and id(w) not in inputs
            and (g.grad_fn is None) != (w.grad_fn is None)
        ):
            has = "no grad_fn" if g.grad_fn is None else f"a grad_fn ({type(g.grad_fn).__name__})"
            run.fail(
                "edges", s, f"{which} has {has} (plain's {'has one' if w.grad_fn else 'none'})"
            )


def _leaves(run: Run, call: Any) -> list:
    return tree_leaves(call, is_leaf=lambda v: is_size(v) or isinstance(v, run.cls))


def _requires(run: Run, v: Any) -> bool:
    return (isinstance(v, (Tensor, run.cls))) and getattr(v, "requires_grad", False) is True


def _floats(run: Run, v: Any) -> bool:
    """Whether v is an instance of a floating-point or complex tensor."""
    if not isinstance(v, run.cls):
        return False
    plain = run.densify(v)
    return plain.is_floating_point() or plain.is_complex()


def _same(t: Tensor) -> Tensor:
    """The form of a tensor that leaves it as it is: a sample `make` gives no instance for
    is declined by the values check, not once more per condition."""
    return t


# -- (d) inference mode -----------------------------------------------------------------


def _inference(run: Run, s: Sample, views_copy: bool) -> None:
    for where in ("outside", "inside"):
        case = _as(s, f"called in inference mode, instances made {where} it")
        with torch.inference_mode(where == "inside"):
            typed = run.typed_call(case, form=_same)
            if typed is None:
                return  # (declined, or no instance: the values check says so)
            plain = run.plain_call(typed)
        with torch.inference_mode():
            found = _calls(run, case, typed, plain)
            if found is None:
                continue
            got, want = found
            flags = [_is_inference(g) for g in result_tensors(got)]
        reason = compare_results(run.plain(got), want, exact=False)
        if reason:
            run.fail("edges", case, reason)
            continue
        inputs = {_storage(t) for t in result_tensors(plain)}
        for k, (flag, w) in enumerate(zip(flags, result_tensors(want))):
            if flag is None or flag == w.is_inference():
                continue
            which = f"result {k}" if len(flags) > 1 else "the result"
            what, plain_is = ("is", "is not") if flag else ("is not", "is")
            problem = f"{which} {what} an inference tensor (plain's {plain_is})"
            if views_copy and flag and _storage(w) in inputs:
                # (plain's is a view of its input, made outside: a copy made inside is one)
                run.copies.append(Failure("edges", s.name, case.label, f"{problem}: a copy"))
            else:
                run.fail("edges", case, problem)


def _storage(t: Tensor) -> int | None:
    with torch._C.DisableTorchFunctionSubclass():
        if t.layout != torch.strided:
            return None
        return t.untyped_storage().data_ptr()


def _is_inference(t: Any) -> bool | None:
    """Whether t is an inference tensor: torch's own flag for a tensor (a subclass too),
    the type's answer for a tensor-like; None where it gives none."""
    if isinstance(t, Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return Tensor.is_inference(t)
    try:
        return bool(t.is_inference())
    except Exception:
        return None


# -- (b) conjugate and negative bits ------------------------------------------------------

#: Lazy forms of a complex tensor: name -> form (each resolves to other values).
_LAZY: dict[str, Callable[[Tensor], Tensor]] = {
    "made of t.conj() (conjugate bit)": lambda t: t.conj(),
    "made of torch._neg_view(t) (negative bit)": torch._neg_view,
}


def _complex_samples(names: list[str], dtypes: Any, hook: Any) -> list[Sample]:
    """Each function's first sample of the complex dtype that goes with the run's
    (complex128 beside float64, else complex64), its first tensor an instance."""
    dtype = torch.complex128 if torch.float64 in dtypes else torch.complex64
    if not names:
        return []
    found, seen = [], set()
    for s in shaped(op_samples(names, (dtype,), 1, ("first",)), hook):
        if s.name not in seen and s.name not in UNDEFINED_VALUES:
            seen.add(s.name)
            found.append(s)
    return found


def _resolved(t: Tensor) -> Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        return t.resolve_conj().resolve_neg()


def _resolved_values(run: Run, obj: Any) -> Any:
    return tree_map_only(Tensor, _resolved, run.plain(obj), is_leaf=is_size)


def _conj_and_neg(run: Run, s: Sample) -> None:
    """The instance made of a lazy tensor stands for its resolved values; calls on it
    equal the plain call on the resolved tensor, and their results resolve to them."""
    picked = [t for k, t in enumerate(tensor_leaves(s.call)) if k in s.picks]
    if not any(t.is_complex() for t in picked):
        return  # (a complex sample of real inputs: linspace's start and end)
    for name, form in _LAZY.items():
        case = _as(s, name)

        def lazy_form(t: Tensor, form: Callable = form) -> Tensor:
            return form(t) if t.is_complex() else t

        lazy = run.typed_call(case, form=lazy_form)
        if lazy is None:
            run.decline(case, "make gave no instance of a complex tensor")
            return
        resolved = run.typed_call(case, form=lambda t, f=lazy_form: _resolved(f(t)))
        if resolved is None:
            return
        plain = run.plain_call(resolved)
        reason = compare_results(_resolved_values(run, run.plain_call(lazy)), plain, exact=True)
        if reason:
            what = "the instance stands for other values than its tensor's"
            run.fail("edges", case, f"{what}: {reason}")
            continue
        _compare_call(run, case, lazy, plain)
    case = _as(s, "on x.conj()")
    typed = run.typed_call(case, form=_same)
    if typed is None or not isinstance(typed[0], run.cls):
        return  # (the method of the type's own instance: the input must be one)
    plain = run.plain_call(typed)
    try:
        typed = (typed[0].conj(), typed[1], typed[2])
    except Exception as err:
        run.raised("edges", case, err, "x.conj()")
        return
    plain = (_resolved(plain[0].conj()), plain[1], plain[2])
    _compare_call(run, case, typed, plain)


def _compare_call(run: Run, case: Sample, typed: tuple, plain: tuple) -> None:
    found = _calls(run, case, typed, plain)
    if found is None:
        return
    got, want = found
    values = _resolved_values(run, got)
    reason = compare_results(values, tree_map_only(Tensor, _resolved, want), exact=False)
    if reason:
        run.fail("edges", case, reason)
        return
    for resolve in (torch.resolve_conj, torch.resolve_neg):
        try:
            again = tree_map(
                lambda r: resolve(r) if _resolvable(run, r) else r, got, is_leaf=is_size
            )
        except Exception as err:
            run.raised("edges", case, err, f"{resolve.__name__} of the result")
            continue
        reason = compare_results(_resolved_values(run, again), values, exact=True)
        if reason:
            run.fail("edges", case, f"{resolve.__name__} of the result: {reason}")


def _resolvable(run: Run, r: Any) -> bool:
    return isinstance(r, (Tensor, run.cls))
