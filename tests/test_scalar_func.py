"""ScalarTensor under torch.func (tensortools/types/scalar/common.py, ``hidden``): a
function of a plain tensor that captures a ScalarTensor, transformed by vmap, grad,
jacrev, jvp, jacfwd, vmap of grad and functionalize, gives what the same transform gives
with the dense matrix captured, in float64. The handlers meet torch.func's wrapped
tensors there (no storage, no value to branch on) and hand them to the dense call; the
calls that meet none run below the transform."""

import pytest
import torch
import torch.nn.functional as F
from _support.tiers import sample

from tensortools import ScalarTensor
from tensortools.dispatch import CannotHoldResult
from tensortools.types.scalar.elementwise import ELEMENTWISE, flags_of

DTYPE = torch.float64
N = 3


def _inputs():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(N, N, dtype=DTYPE, generator=g)
    v = torch.randn(N, dtype=DTYPE, generator=g)
    return {
        "number": torch.tensor([1.0, 0.5, -2.0], dtype=DTYPE),
        "matrix": torch.stack([m, 0.5 * m, -m]),
        "vector": torch.stack([v, 0.5 * v, -v]),
        "batch of matrices": torch.stack([m.expand(2, N, N), -m.expand(2, N, N)]),
    }


INPUTS = _inputs()

#: name -> (f(d, y), the kind of y). d is the ScalarTensor or its dense matrix.
CASES = {
    "d * y": (lambda d, y: d * y, "number"),
    "y * d": (lambda d, y: y * d, "number"),
    "mul(d, y)": (lambda d, y: torch.mul(d, y), "number"),
    "multiply(y, d)": (lambda d, y: torch.multiply(y, d), "number"),
    "d * M": (lambda d, y: d * y, "matrix"),
    "d / y": (lambda d, y: d / y, "number"),
    "div(d, y, floor)": (lambda d, y: torch.div(d, y, rounding_mode="floor"), "number"),
    "d + M": (lambda d, y: d + y, "matrix"),
    "M + d": (lambda d, y: y + d, "matrix"),
    "add(M, d, alpha=2)": (lambda d, y: torch.add(y, d, alpha=2), "matrix"),
    "d + y": (lambda d, y: d + y, "number"),
    "M - d": (lambda d, y: y - d, "matrix"),
    "d - M": (lambda d, y: d - y, "matrix"),
    "sub(d, y)": (lambda d, y: torch.sub(d, y), "number"),
    "d @ M": (lambda d, y: d @ y, "matrix"),
    "M @ d": (lambda d, y: y @ d, "matrix"),
    "d @ Ms": (lambda d, y: d @ y, "batch of matrices"),
    "matmul(d, v)": (lambda d, y: torch.matmul(d, y), "vector"),
    "v @ d": (lambda d, y: y @ d, "vector"),
    "mm(d, M)": (lambda d, y: torch.mm(d, y), "matrix"),
    "mm(M, d)": (lambda d, y: torch.mm(y, d), "matrix"),
    "mv(d, v)": (lambda d, y: torch.mv(d, y), "vector"),
    "(2 * d) @ M": (lambda d, y: (2 * d) @ y, "matrix"),
    "(d * y) @ M": (lambda d, y: (d * y) @ INPUTS["matrix"][0], "number"),
    "sum(d * y)": (lambda d, y: torch.sum(d * y), "number"),
    "sum(d) * y": (lambda d, y: torch.sum(d) * y, "number"),
    "sum(d @ M, 0)": (lambda d, y: torch.sum(d @ y, 0), "matrix"),
    "trace(d * y)": (lambda d, y: torch.trace(d * y), "number"),
    "trace(d @ M)": (lambda d, y: torch.trace(d @ y), "matrix"),
    "trace(d) * y": (lambda d, y: torch.trace(d) * y, "number"),
    "solve(d, M)": (lambda d, y: torch.linalg.solve(d, y), "matrix"),
}


def _unary(f):
    return lambda d, y: f(d * y)


def _scaled(f):
    return lambda d, y: f(d) * y


def _second(f):
    return lambda d, y: f(d, y)


def _method(name):
    return lambda t, *args: getattr(t, name)(*args)


def _elementwise_cases():
    # Each of the functions the elementwise handlers answer, applied to d times the
    # transformed number, to d (then times it), and with it as the second argument where
    # the function takes one: the calls whose probe met a wrapped tensor.
    one = torch.tensor(0.5, dtype=DTYPE)
    dense = torch.eye(N, dtype=DTYPE)
    cases = {}
    for f in ELEMENTWISE:
        name = getattr(f, "__name__", str(f))
        if getattr(torch.Tensor, name, None) is f:  # a method (d.float()): its method form
            f = _method(name)
        for form, make in (("f(d * y)", _unary), ("f(d) * y", _scaled), ("f(d, y)", _second)):
            if make is _second and any(position == 0 for _, position in flags_of(f)):
                continue  # (y would be the inplace or training flag: relu(d, y))
            fn = make(f)
            try:
                fn(dense, one)
            except Exception:
                continue  # the plain call takes no such arguments
            dense_f = make(DENSE_FORM.get(f, f)) if make is _scaled else fn
            cases[f"{name}: {form}"] = (fn, "number", dense_f)
    return cases


#: functions whose dense call a transform refuses though it is deterministic: vmap takes
#: rrelu for random, which it is only in training; out of it, its slope is fixed
#: ((lower + upper) / 2, the defaults 1/8 and 1/3), and the ScalarTensor's answer for
#: rrelu(d), a constant of the transform, is that of leaky_relu with it
DENSE_FORM = {F.rrelu: lambda t: F.leaky_relu(t, (1 / 8 + 1 / 3) / 2)}


ELEMENTWISE_CASES = _elementwise_cases()


def _transforms(fn, kind):
    batch = INPUTS[kind]
    one, tangent = batch[0], torch.ones_like(batch[0])

    def loss(y):
        out = fn(y)
        return (out * torch.linspace(-1, 1, out.numel(), dtype=DTYPE).view(out.shape)).sum()

    return {
        "vmap": lambda: torch.func.vmap(fn)(batch),
        "grad": lambda: torch.func.grad(loss)(one),
        "jacrev": lambda: torch.func.jacrev(fn)(one),
        "jvp": lambda: torch.func.jvp(fn, (one,), (tangent,)),
        "jacfwd": lambda: torch.func.jacfwd(fn)(one),
        "vmap of grad": lambda: torch.func.vmap(torch.func.grad(loss))(batch),
        "functionalize": lambda: torch.func.functionalize(fn)(one),
    }


TRANSFORMS = ["vmap", "grad", "jacrev", "jvp", "jacfwd", "vmap of grad", "functionalize"]


def _check(f, kind, transform, value, dense_f=None):
    d = ScalarTensor(N, value, dtype=DTYPE)
    dense = d.tensor()
    plain = _transforms(lambda y: (dense_f or f)(dense, y), kind)[transform]
    typed = _transforms(lambda y: f(d, y), kind)[transform]
    try:
        want = plain()
    except Exception as err:
        # the transform refuses the plain function (a non-float output under grad): the
        # ScalarTensor's must not answer either
        with pytest.raises(type(err)):
            typed()
        return
    got = typed()
    for t in torch.utils._pytree.tree_leaves(got):
        assert type(t) is torch.Tensor, type(t)  # torch.func's results are plain tensors
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("value", [1.5, -2.0])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", list(CASES))
def test_captured_scalar_tensor_matches_dense(name, transform, value):
    f, kind = CASES[name]
    _check(f, kind, transform, value)


@pytest.mark.parametrize(
    "name,transform",
    sample([(n, t) for n in ELEMENTWISE_CASES for t in TRANSFORMS], 60, "scalar func elementwise"),
)
def test_captured_scalar_tensor_elementwise_matches_dense(name, transform):
    f, kind, dense_f = ELEMENTWISE_CASES[name]
    _check(f, kind, transform, 0.75, dense_f)


def test_the_elementwise_sweep_meets_wrapped_operands():
    # (what the sweep covers: the calls that read a wrapped operand's storage before)
    assert sum(name.endswith("f(d, y)") for name in ELEMENTWISE_CASES) >= 20
    assert sum(name.endswith("f(d) * y") for name in ELEMENTWISE_CASES) >= 60


#: functions of y that make their ScalarTensor (or dense matrix) inside the transform
MADE_INSIDE = {
    "d * y": lambda make, y: make() * y,
    "sin(d) * y": lambda make, y: torch.sin(make()) * y,
    "(d + d) @ M * y": lambda make, y: (make() + make()) @ INPUTS["matrix"][0] * y,
    "sum(d * 2) * y": lambda make, y: torch.sum(make() * 2) * y,
    "d @ (M * y)": lambda make, y: make() @ (INPUTS["matrix"][0] * y),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", list(MADE_INSIDE))
def test_a_scalar_tensor_made_inside_the_transform(name, transform):
    f = MADE_INSIDE[name]
    want = _transforms(lambda y: f(lambda: 1.5 * torch.eye(N, dtype=DTYPE), y), "number")
    got = _transforms(lambda y: f(lambda: ScalarTensor(N, 1.5, dtype=DTYPE), y), "number")
    torch.testing.assert_close(got[transform](), want[transform]())


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.0, -0.0])
@pytest.mark.parametrize("transform", ["vmap", "jvp", "jacrev"])
@pytest.mark.parametrize("name", ["d * y", "d @ M", "M @ d", "M + d", "d / y"])
def test_special_values_under_transforms(name, transform, value):
    # inf * 0 off the diagonal and 0 * inf in a product's sum: NaN where the dense
    # matrix's answer has it, never a structured answer that lacks it
    f, kind = CASES[name]
    _check(f, kind, transform, value)


def test_a_non_finite_factor_under_vmap():
    # The product's finiteness check cannot run on a batched factor; the dense product
    # answers, with its NaN where 0 * inf is summed.
    d = ScalarTensor(N, 2.0, dtype=DTYPE)
    ms = INPUTS["matrix"].clone()
    ms[1, 0, 2] = float("inf")
    got = torch.func.vmap(lambda m: d @ m)(ms)
    want = torch.func.vmap(lambda m: d.tensor() @ m)(ms)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got[1, :, 2].isnan().sum() == N - 1 and got[0].isfinite().all()


def test_plain_operands_keep_the_structured_answers():
    # Outside the transforms the handlers still answer without the dense matrix.
    d = ScalarTensor(N, 2.0, dtype=DTYPE)
    y = torch.tensor(0.5, dtype=DTYPE)
    m = INPUTS["matrix"][0]
    assert isinstance(d * y, ScalarTensor) and (d * y).value == 1.0
    assert isinstance(d / y, ScalarTensor) and (d / y).value == 4.0
    assert isinstance(torch.clamp(d, max=y), ScalarTensor)
    torch.testing.assert_close(d @ m, 2.0 * m, rtol=0, atol=0)
    # and inside them, for operands that are not wrapped (numbers, other ScalarTensors)
    seen = []

    def f(y):
        seen.append(type(F.relu(d) * 2 + d))
        return (d * 2.0) @ y

    torch.func.vmap(f)(INPUTS["matrix"])
    assert seen == [ScalarTensor]


def test_in_place_with_a_wrapped_operand_raises_and_leaves_d():
    # (a batched number cannot go into the one number d stores: tests/
    # test_scalar_transform_writes.py sweeps every in-place form under every transform)
    d = ScalarTensor(N, 2.0, dtype=DTYPE)
    with pytest.raises(CannotHoldResult, match="'other' is a tensor of a torch.func transform"):
        torch.func.vmap(lambda y: d.mul_(y))(INPUTS["number"])
    with pytest.raises(CannotHoldResult, match="'other' is a tensor of a torch.func transform"):
        torch.func.vmap(lambda y: d.add_(y))(INPUTS["number"])
    assert d.value == 2.0 and d.dtype == DTYPE
