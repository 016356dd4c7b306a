"""What torch.compile (torch 2.13) cannot compile for any ``torch.Tensor`` subclass that
uses ``__torch_function__``, MetadataTensor and LoggingTensor among them: the list that
docs/metadata-tensor.md ("What does not compile") gives.

Each limit is checked on a plain subclass (``class Sub(torch.Tensor): pass``, torch's own
default ``__torch_function__``) and on MetadataTensor: both must fail alike, which shows
that the limit is torch's. When a torch release compiles one of them, its test fails
here with a message saying so: take the case out of the docs' list and out of LIMITS.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tensortools import MetadataTensor

pytestmark = pytest.mark.slow  # (inductor compiles)


class Sub(torch.Tensor):
    pass


MAKERS = {
    "plain subclass": lambda t: t.as_subclass(Sub),
    "MetadataTensor": lambda t: MetadataTensor(t, {"k": 1}),
}


def _grad_step(x, w):
    return ((x * w).sin() + 1).sum()


# name -> (backend, function of (x, w), w requires grad). (torch.compile's default
# backend is inductor.)
LIMITS = {
    "x.T, x.mT (properties that return tensors)": ("eager", lambda x, w: x.T + 1, False),
}

# What torch 2.13 cannot compile for a bare subclass, but compiles for tensortools' types:
# AOTAutograd's check of custom operators declines every call with a subclass tensor, so
# that its __torch_dispatch__ may run, and a type without one is left with no handler
# (pytorch/pytorch#193932, fixed upstream by #193968). tensortools/_compile_fixes.py runs
# its types' calls below that check. When a torch release compiles these for the bare
# subclass, the module and this list can go.
FIXED_HERE = {
    "matmul (@, mm, linear)": ("inductor", lambda x, w: x @ w, False),
    "sort": ("inductor", lambda x, w: torch.sort(x, dim=1), False),
    "topk": ("inductor", lambda x, w: torch.topk(x, 2), False),
    "cumsum": ("inductor", lambda x, w: torch.cumsum(x, 0), False),
    "svdvals": ("inductor", lambda x, w: torch.linalg.svdvals(x), False),
    "an input that requires grad": ("inductor", _grad_step, True),
    "any call under aot_eager": ("aot_eager", lambda x, w: x + w, False),
}

# What compiles but comes out of torch.compile without its type: F.hardsigmoid and
# F.hardswish under inductor give a plain Tensor, for a bare subclass as for MetadataTensor.
LOSE_THE_TYPE = {
    "F.hardsigmoid, F.hardswish": (
        "inductor",
        lambda x, w: (torch.nn.functional.hardsigmoid(x), torch.nn.functional.hardswish(x)),
        False,
    ),
}

# What torch cannot compile for a bare subclass but compiles for tensortools' wrapper types:
# their plain call of Tensor's operators written in Python (``__pow__``, ``__rsub__``, ...)
# calls the function torch's wrapper wraps (tensortools.dispatch.wrapper, call_plain).
BARE_ONLY = {"x ** 2": ("eager", lambda x, w: x**2, False)}

# What compiles, beside them (so that the limits above are not the whole story).
WORKS = {
    "pointwise": ("inductor", lambda x, w: (x * w).sin() + 1, False),
    "split, chunk, unbind": (
        "inductor",
        lambda x, w: (*torch.split(x, [1, 3]), *x.chunk(2, dim=1), *x.unbind(0)),
        False,
    ),
    "reductions and views": (
        "inductor",
        lambda x, w: x.sum(0) + x.t().mean(1) + x.reshape(16)[:4] + x.permute(1, 0)[0],
        False,
    ),
    "matmul, sort, topk under the eager backend": (
        "eager",
        lambda x, w: (x @ w, torch.sort(x).values, torch.topk(x, 2).values),
        False,
    ),
    "an input that requires grad, eager backend": ("eager", _grad_step, True),
}


def _compile_and_run(kind, backend, func, grad):
    torch._dynamo.reset()
    x = MAKERS[kind](torch.randn(4, 4))
    w = MAKERS[kind](torch.randn(4, 4))
    if grad:
        w.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.compile(func, fullgraph=True, backend=backend)(x, w)
        if grad:
            out.backward()
            assert w.grad is not None
    return out


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize("limit", LIMITS)
def test_what_torch_cannot_compile_for_any_subclass_still_fails(limit, kind):
    backend, func, grad = LIMITS[limit]
    try:
        _compile_and_run(kind, backend, func, grad)
    except Exception:  # noqa: BLE001 - torch's errors differ by case: any failure counts
        return
    pytest.fail(
        f"torch {torch.__version__} now compiles {limit!r} for a {kind} "
        f"(backend {backend!r}): take it out of LIMITS and out of docs/metadata-tensor.md"
    )


@pytest.mark.parametrize("case", FIXED_HERE)
def test_what_torch_cannot_compile_for_a_bare_subclass_compiles_for_ours(case):
    backend, func, grad = FIXED_HERE[case]
    try:
        _compile_and_run("plain subclass", backend, func, grad)
    except Exception:  # noqa: BLE001 - torch's errors differ by case: any failure counts
        pass
    else:
        pytest.fail(
            f"torch {torch.__version__} now compiles {case!r} for a bare subclass (backend "
            f"{backend!r}): take it out of FIXED_HERE, and tensortools/_compile_fixes.py "
            "out of the package once the list is empty"
        )
    torch.manual_seed(0)
    got = _compile_and_run("MetadataTensor", backend, func, grad)
    torch.manual_seed(0)
    x, w = (MAKERS["MetadataTensor"](torch.randn(4, 4)) for _ in range(2))
    if grad:
        w.requires_grad_()
    want = func(x, w)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, e in zip(got, want, strict=True):
        assert type(g) is type(e) is MetadataTensor and g.metadata == e.metadata == {"k": 1}
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize("case", WORKS)
def test_what_compiles_for_a_subclass(case, kind):
    backend, func, grad = WORKS[case]
    out = _compile_and_run(kind, backend, func, grad)
    if kind == "MetadataTensor":
        for t in out if isinstance(out, tuple) else (out,):
            assert isinstance(t, MetadataTensor) and t.metadata == {"k": 1}


@pytest.mark.parametrize("limit", BARE_ONLY)
def test_what_a_bare_subclass_cannot_compile_metadata_tensor_can(limit):
    bare_backend, func, grad = BARE_ONLY[limit]
    with pytest.raises(Exception):  # noqa: B017,PT011 - torch's error, whatever it is
        _compile_and_run("plain subclass", bare_backend, func, grad)
    for backend in (bare_backend, "inductor"):
        out = _compile_and_run("MetadataTensor", backend, func, grad)
        assert isinstance(out, MetadataTensor) and out.metadata == {"k": 1}


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize("limit", LOSE_THE_TYPE)
def test_what_compiles_without_the_subclass_still_does(limit, kind):
    backend, func, grad = LOSE_THE_TYPE[limit]
    out = _compile_and_run(kind, backend, func, grad)
    if all(type(t) is torch.Tensor for t in out):
        return
    pytest.fail(
        f"torch {torch.__version__} now keeps the type of {limit!r} for a {kind} "
        f"(backend {backend!r}): take it out of LOSE_THE_TYPE and out of "
        "docs/metadata-tensor.md"
    )


def test_iteration_compiles_without_the_rows_metadata():
    """``for r in x`` and ``list(x)``: dynamo unpacks a tensor by indexing its graph value
    itself (torch/_dynamo/variables/tensor.py, unpack_var_sequence), keeping the class but
    calling no __torch_function__ (and no class's own __iter__), so the rows have no
    metadata; unbind and x[i] keep it (WORKS)."""
    out = _compile_and_run("MetadataTensor", "eager", lambda x, w: [r * 1 for r in x], False)
    if any(r.metadata != {"k": 1} for r in out):
        return
    pytest.fail(
        f"torch {torch.__version__} now keeps the metadata of a MetadataTensor's rows in "
        "compiled iteration: take it out of docs/metadata-tensor.md"
    )


def _batch():
    rows = [MetadataTensor(torch.randn(4, 3), {"k": k}) for k in range(4)]
    return torch.stack(rows)


# What compiles with fullgraph=True once the binding's reading of torch's schemas is a
# constant to dynamo (it traced the schema lookup, and str.startswith on a function's
# __name__ stopped it): the calls whose handlers bind their arguments. (aot_eager: see
# FIXED_HERE.)
BOUND = {
    "torch.cat": lambda x, b: torch.cat([x, x]),
    "torch.cat along 1": lambda x, b: torch.cat([x, x], dim=1),
    "b.chunk(2)": lambda x, b: b.chunk(2),
    "b.chunk(2, dim=1)": lambda x, b: b.chunk(2, dim=1),
    "torch.tensor_split(b, 2)": lambda x, b: torch.tensor_split(b, 2),
    "b.tensor_split([1, 3])": lambda x, b: b.tensor_split([1, 3]),
    "b.argsort(dim=1)": lambda x, b: b.argsort(dim=1),
    "torch.argsort(b, 0)": lambda x, b: torch.argsort(b, 0),
    "torch.stack(samples)": lambda x, b: torch.stack([x, x + 1]),
    "torch.stack(samples, 1)": lambda x, b: torch.stack([x, x], 1),
}


@pytest.mark.parametrize("case", BOUND)
def test_calls_whose_arguments_are_bound_compile_with_eagers_values(case):
    func = BOUND[case]
    x, b = MetadataTensor(torch.randn(4, 3), {"k": 1}), _batch()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(func, fullgraph=True, backend="eager")(x, b)
    want = func(x, b)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and g.metadata == w.metadata
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w.as_subclass(torch.Tensor))
