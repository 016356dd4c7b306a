"""tensortools.ops.axpby against alpha * x + beta * y."""

from functools import partial

import pytest
import torch
from _support.op_records import AutocastUnit, CompileCall, ErrorCall, Transform
from _support.op_samples import D, OperatorTests, T, make, requiring_grad

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs, ops, reference

SHAPES = [
    ((5,), (5,)),
    ((3, 4), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((), (3,)),
    ((0, 2), (2,)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("xs,ys", SHAPES)
def test_matches_reference_with_broadcasting(xs, ys, dtype):
    x, y = torch.randn(xs, dtype=dtype), torch.randn(ys, dtype=dtype)
    for alpha, beta in [(2.0, 1.0), (3.0, -1.0), (0.5, -0.25), (0, 7)]:
        got = ops.axpby(x, y, alpha, beta)
        torch.testing.assert_close(got, reference.axpby(x, y, alpha, beta), rtol=0, atol=0)


def test_non_contiguous_and_expanded_inputs():
    x = torch.randn(4, 6, dtype=torch.float64)[:, ::2]
    y = torch.randn(4, 1, dtype=torch.float64).expand(4, 3)
    torch.testing.assert_close(ops.axpby(x, y, 2, 3), 2 * x + 3 * y, rtol=0, atol=0)
    torch.testing.assert_close(ops.axpby(x.t(), y.t(), 2, 3), 2 * x.t() + 3 * y.t(), rtol=0, atol=0)


def test_special_values_like_reference():
    x = torch.tensor([float("inf"), float("nan"), 0.0, -0.0, 1e38])
    y = torch.tensor([1.0, 1.0, -0.0, -0.0, 1e38])
    torch.testing.assert_close(
        ops.axpby(x, y, 3.0, 5.0), reference.axpby(x, y, 3.0, 5.0), equal_nan=True, rtol=0, atol=0
    )


def test_gradcheck_gradgradcheck_and_broadcast_gradients():
    x = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    y = torch.randn(1, 4, dtype=torch.float64, requires_grad=True)
    f = lambda a, b: ops.axpby(a, b, 1.5, -2.0)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, y))
    assert torch.autograd.gradgradcheck(f, (x, y))
    g = torch.randn(3, 4, dtype=torch.float64)
    got = torch.autograd.grad(f(x, y), (x, y), g)
    want = torch.autograd.grad(reference.axpby(x, y, 1.5, -2.0), (x, y), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_opcheck_and_compile():
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    torch.library.opcheck(torch.ops.tensortools.axpby.default, (x, y, 2.0, -1.0))
    compiled = torch.compile(
        lambda a, b: ops.axpby(a, b, 2.0, -1.0), fullgraph=True, backend="aot_eager"
    )
    torch.testing.assert_close(compiled(x, y), 2 * x - y)


def test_bad_input():
    x = torch.ones(3)
    with pytest.raises(TypeError, match="'y' must have the same dtype as 'x'"):
        ops.axpby(x, x.double(), 1, 1)
    with pytest.raises(TypeError, match="'x' must have dtype Float or Double"):
        ops.axpby(x.long(), x.long(), 1, 1)
    with pytest.raises(TypeError, match="'alpha' must be a real number"):
        ops.axpby(x, x, "2", 1)
    with pytest.raises(TypeError, match="'beta' must be a real number"):
        ops.axpby(x, x, 1, torch.ones(1))
    with pytest.raises(TypeError, match="'x' must be a torch.Tensor"):
        ops.axpby([1.0], x, 1, 1)
    with pytest.raises(
        ValueError, match=r"'x' and 'y' must broadcast together, got shapes \[3\] and \[4\]"
    ):
        ops.axpby(torch.ones(3), torch.ones(4), 1, 1)


def test_with_the_tensor_types():
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    m = ops.axpby(MetadataTensor(x, {"k": 1}), y, 2.0, 1.0)
    assert isinstance(m, MetadataTensor) and m.metadata == {"k": 1}
    torch.testing.assert_close(m.as_subclass(torch.Tensor), 2 * x + y, rtol=0, atol=0)
    with capture_logs() as logs:
        ops.axpby(LoggingTensor(x), y, 2.0, 1.0)
    assert [r.function for r in logs] == ["tensortools.ops.axpby"]
    d = ScalarTensor(3, 1.5)
    torch.testing.assert_close(ops.axpby(d, y, 2.0, 1.0), 2 * d.tensor() + y, rtol=0, atol=0)


# --- samples of the raw operator, and the checks every operator's samples go through ---


def _axpby_samples(layout, dtype, device):
    n = 0 if layout == "empty" else 2
    x, y = (make((n, 3, 4, 5), layout, dtype, device) for _ in range(2))
    return [
        (*requiring_grad(x, y), 2.0, -0.5),
        (*requiring_grad(x.detach(), make((5,), layout, dtype, device)), 1.0, 3.0),
        (
            *requiring_grad(
                make((3, 1), layout, dtype, device), make((1, 4), layout, dtype, device)
            ),
            1.5,
            -2.0,
        ),
    ]


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
SAMPLE_BUILDERS = {"axpby": _axpby_samples}


def _metadata(*shape, k=1):
    return MetadataTensor(torch.randn(shape, dtype=D), metadata={"k": k})


class TestSamples(OperatorTests):
    """axpby's samples against reference.axpby, its gradients, opcheck and meta kernel;
    its cases of the sweeps over every operator (_support/op_records.py)."""

    builders = SAMPLE_BUILDERS
    references = {"axpby": reference.axpby}
    error_calls = {
        "axpby": ErrorCall(
            partial(ops.axpby, alpha=2.0, beta=-0.5),
            lambda: dict(x=make((3, 4)), y=make((3, 4))),
            partial(reference.axpby, alpha=2.0, beta=-0.5),
            # a 0-d tensor broadcasts
            {"x": frozenset({"0-d"}), "y": frozenset({"0-d"})},
        )
    }
    raw_accepts = {"axpby": {"x": frozenset({"0-d"}), "y": frozenset({"0-d"})}}  # broadcasting
    autocast = {
        "axpby": AutocastUnit(
            lambda x, y: ops.axpby(x, y, 2.0, -0.5),
            lambda x, y: reference.axpby(x, y, 2.0, -0.5),
            lambda device: [
                torch.randn(4, 5, device=device).requires_grad_(),
                torch.randn(5, device=device).requires_grad_(),
            ],
        )
    }
    compile_calls = {
        "axpby": CompileCall(
            lambda a, b: ops.axpby(a, b, 2.0, 3.0),
            lambda: (_metadata(4, 3), torch.ones(4, 3, dtype=D)),
        )
    }
    transforms = {
        "axpby": Transform(
            lambda x, y: ops.axpby(x, y, 2.0, -3.0),
            lambda x, y: reference.axpby(x, y, 2.0, -3.0),
            [(3, 4), (4,)],
            (0, None),
            "axpby",
        ),
        "axpby_both": Transform(
            lambda x, y: ops.axpby(x, y, 0.5, 1.5),
            lambda x, y: reference.axpby(x, y, 0.5, 1.5),
            [(4,), (3, 1)],
            (0, 1),
            "axpby",
        ),
    }


sample_inputs = TestSamples.sample_inputs


# --- more devices and refusals -------------------------------------------------------


def test_axpby_refuses_complex_scales_on_every_device():
    for device in ("cpu", "meta"):
        x = torch.randn(3, device=device)
        for alpha, beta, name in ((1j, 1.0, "alpha"), (1.0, 2 + 0j, "beta")):
            with pytest.raises(TypeError, match=f"'{name}' must be a real number"):
                T.axpby(x, x, alpha, beta)


@pytest.mark.cuda
def test_axpby_matches_cpu_on_cuda():
    x = torch.randn(3, 1, 5, dtype=D)
    y = torch.randn(4, 5, dtype=D)[:, ::1]
    yt = torch.randn(5, 4, dtype=D).t()
    for a, b in ((x, y), (x, yt), (y, y), (torch.randn((), dtype=D), y)):
        torch.testing.assert_close(
            ops.axpby(a.cuda(), b.cuda(), 2.0, -0.5).cpu(),
            reference.axpby(a, b, 2.0, -0.5),
            rtol=0,
            atol=1e-15,
        )
    for dtype in (torch.float16, torch.bfloat16):
        got = ops.axpby(x.to("cuda", dtype), y.to("cuda", dtype), 2.0, -0.5)
        torch.testing.assert_close(got.cpu(), reference.axpby(x, y, 2.0, -0.5).to(dtype))


@pytest.mark.cuda
def test_argument_on_the_wrong_device_is_named():
    with pytest.raises(ValueError, match="'y' must be on the same device as 'x'"):
        ops.axpby(torch.randn(3, device="cuda"), torch.randn(3), 1.0, 1.0)
