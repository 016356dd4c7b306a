"""The kernels behind ScalarTensor's handlers (tensortools/ops/scalar_ops.py): add_diagonal,
scale and scale_finite against the plain-PyTorch maths, over dtypes, shapes, layouts and
devices, their gradients, opcheck, torch.compile and bad input."""

import pytest
import torch
from _support.op_records import AutocastUnit, CompileCall, ErrorCall, Transform
from _support.op_samples import D, OperatorTests, T, make, requiring_grad

from tensortools import MetadataTensor, ScalarTensor, ops
from tensortools.types.scalar.common import scale_finite


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (2, 1, 1), (0, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_add_diagonal_and_scale_match_reference(shape, dtype):
    t = (torch.randn(shape) * 10).to(dtype)
    n = shape[-1]
    eye = torch.eye(n, dtype=dtype)
    torch.testing.assert_close(ops.add_diagonal(t, 3), t + 3 * eye, rtol=0, atol=0)
    torch.testing.assert_close(ops.scale(t, -2), t * -2, rtol=0, atol=0)


def test_kernels_accept_non_contiguous_input():
    t = torch.randn(6, 6, dtype=torch.float64)[::2, ::2].t()
    assert not t.is_contiguous()
    torch.testing.assert_close(ops.add_diagonal(t, 1.5), t + 1.5 * torch.eye(3, dtype=t.dtype))
    torch.testing.assert_close(ops.scale(t, 1.5), t * 1.5)


@pytest.mark.slow
def test_kernels_gradcheck_and_opcheck():
    t = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    v = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ops.add_diagonal, (t, v))
    assert torch.autograd.gradcheck(ops.scale, (t, v))
    assert torch.autograd.gradgradcheck(ops.scale, (t, v))
    for op in (torch.ops.tensortools.add_diagonal.default, torch.ops.tensortools.scale.default):
        torch.library.opcheck(op, (t, v))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
)
@pytest.mark.parametrize("numel", [0, 1, 7, 100_003])  # the last spans several tasks
def test_scale_finite_matches_reference(dtype, numel):
    t = (torch.randn(numel) * 10).to(dtype)
    out, all_finite = scale_finite(t, torch.tensor(-3, dtype=dtype))
    torch.testing.assert_close(out, t * -3, rtol=0, atol=0)
    assert all_finite.dtype == torch.bool and all_finite.dim() == 0 and bool(all_finite)
    if dtype.is_floating_point and numel:
        for bad in (float("inf"), -float("inf"), float("nan")):
            for where in {0, numel // 2, numel - 1}:
                u = t.clone()
                u[where] = bad
                out, all_finite = scale_finite(u, torch.tensor(2, dtype=dtype))
                assert not bool(all_finite), (bad, where)
                torch.testing.assert_close(out, u * 2, rtol=0, atol=0, equal_nan=True)


def test_scale_finite_gradcheck_and_opcheck():
    t = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    v = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: scale_finite(a, b)[0], (t, v))
    torch.library.opcheck(torch.ops.tensortools.scale_finite.default, (t, v))
    with pytest.raises(
        TypeError, match="tensortools.scale_finite: 'value' must have the same dtype"
    ):
        torch.ops.tensortools.scale_finite(torch.ones(2), torch.tensor(1.0, dtype=torch.float64))


def test_kernels_compile():
    f = torch.compile(
        lambda t: ops.scale(ops.add_diagonal(t, 2.0), 3.0), fullgraph=True, backend="aot_eager"
    )
    t = torch.randn(4, 4)
    torch.testing.assert_close(f(t), (t + 2 * torch.eye(4)) * 3)


def test_kernel_bad_input():
    with pytest.raises(ValueError, match="'input' must be a square matrix"):
        ops.add_diagonal(torch.ones(2, 3), 1)
    with pytest.raises(ValueError, match="'input' must be a square matrix"):
        ops.add_diagonal(torch.ones(3), 1)
    with pytest.raises(TypeError, match="'input' must have dtype"):
        ops.scale(torch.ones(2, dtype=torch.complex64), 1)
    with pytest.raises(TypeError, match="'input' must have dtype"):
        ops.scale(torch.ones(2, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="'value' must be a number or a 0-d tensor"):
        ops.scale(torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError, match="'value' must be a number"):
        ops.scale(torch.ones(2), "2")
    with pytest.raises(TypeError, match="'input' must be a torch.Tensor"):
        ops.scale([1.0], 2)
    with pytest.raises(ValueError, match="'value' must be 0-D"):
        torch.ops.tensortools.scale(torch.ones(2), torch.ones(1))
    with pytest.raises(TypeError, match="'value' must have the same dtype as 'input'"):
        torch.ops.tensortools.scale(torch.ones(2), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.int8])
def test_integer_kernels_wrap_around_like_torch(dtype):
    # Signed overflow is computed without undefined behaviour and wraps as torch does.
    top = torch.iinfo(dtype).max
    t = torch.full((40, 40), top, dtype=dtype)
    torch.testing.assert_close(
        ops.add_diagonal(t, 1), t + torch.eye(40, dtype=dtype), rtol=0, atol=0
    )
    torch.testing.assert_close(ops.scale(t, 3), t * 3, rtol=0, atol=0)
    torch.testing.assert_close(ops.scale(t, -1), t * -1, rtol=0, atol=0)


# --- samples of the raw operators, and the checks every operator's samples go through ---


def _square_samples(layout, dtype, device):
    n = 0 if layout == "empty" else 4
    t = make((2, 3, n, n), layout, dtype, device)
    value = torch.tensor(1.5, dtype=D, device=device).to(dtype)
    return [
        tuple(requiring_grad(t, value)),
        (t.detach()[0, 0], torch.tensor(-2.0, dtype=D, device=device).to(dtype)),
    ]


def _add_diagonal_reference(input, value):
    return input + value * torch.eye(input.shape[-1], dtype=input.dtype, device=input.device)


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
SAMPLE_BUILDERS = {
    "add_diagonal": _square_samples,
    "scale": _square_samples,
    "scale_finite": _square_samples,
}
#: every real dtype the kernels take, on every device
DTYPES = dict.fromkeys(
    ("cpu", "cuda"),
    (D, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8),
)


#: the dtypes a 0-d value converts from to input's
_VALUE_KINDS = frozenset({"int64", "bool", "float16", "float32"})


def _autocast_leaves(device):
    return [
        torch.randn(2, 4, 4, device=device).requires_grad_(),
        torch.tensor(1.5, device=device).requires_grad_(),
    ]


def _metadata(t, k):
    return MetadataTensor(t, metadata={"k": k})


def _times(x, v):
    return v * x


def _eye_plus(x, v):
    return x + v * torch.eye(x.shape[-1], dtype=x.dtype)


class TestSamples(OperatorTests):
    """The scalar kernels' samples against their maths, gradients, opcheck, meta kernels;
    their cases of the sweeps over every operator."""

    builders = SAMPLE_BUILDERS
    references = {
        "add_diagonal": _add_diagonal_reference,
        "scale": lambda input, value: input * value,
        "scale_finite": lambda input, value: (input * value, input.isfinite().all()),
    }
    dtypes = dict.fromkeys(SAMPLE_BUILDERS, DTYPES)
    numbers = dict.fromkeys(SAMPLE_BUILDERS, (1,))

    # --- its cases of the sweeps over every operator (_support/op_records.py) ---
    error_calls = {
        "scale": ErrorCall(
            ops.scale,
            lambda: dict(input=make((2, 3, 3)), value=torch.tensor(1.5, dtype=D)),
            lambda input, value: input * value.to(input.dtype),
            # every real dtype and shape; the value converts to input's dtype
            # a CPU 0-d value is a number: it goes with an input on any device
            {
                "input": frozenset({"meta", "0-d", "int64", "float16", "float32"}),
                "value": _VALUE_KINDS,
            },
        ),
        "add_diagonal": ErrorCall(
            ops.add_diagonal,
            lambda: dict(input=make((2, 3, 3)), value=torch.tensor(1.5, dtype=D)),
            lambda input, value: _add_diagonal_reference(input, value.to(input.dtype)),
            {"input": frozenset({"meta", "int64", "float16", "float32"}), "value": _VALUE_KINDS},
        ),
    }
    raw_accepts = {
        "scale": {"input": frozenset({"0-d"})},  # any shape
        "scale_finite": {"input": frozenset({"0-d"})},
    }
    autocast = {
        "scale": AutocastUnit(ops.scale, lambda t, v: v * t, _autocast_leaves),
        "add_diagonal": AutocastUnit(
            ops.add_diagonal, lambda t, v: t + v * torch.eye(4, device=t.device), _autocast_leaves
        ),
    }
    compile_calls = {
        "add_diagonal": CompileCall(
            lambda a: ops.add_diagonal(a, 2.0), lambda: (_metadata(torch.randn(3, 3, dtype=D), 4),)
        ),
        "scale": CompileCall(
            lambda a: ops.scale(a, 2.0), lambda: (_metadata(torch.randn(4, 3, dtype=D), 1),)
        ),
    }
    transforms = {
        "scale": Transform(ops.scale, _times, [(3, 4), ()], (0, None), "scale"),
        "scale_value": Transform(ops.scale, _times, [(3, 4), ()], (None, 0), "scale"),
        # (the product ScalarTensor's multiplications run; all_finite has no derivative)
        "scale_finite": Transform(
            lambda x, v: T.scale_finite(x, v)[0], _times, [(3, 4), ()], (0, None), "scale_finite"
        ),
        "add_diagonal": Transform(
            ops.add_diagonal, _eye_plus, [(3, 3), ()], (0, None), "add_diagonal"
        ),
        "add_diagonal_value": Transform(
            ops.add_diagonal, _eye_plus, [(2, 3, 3), ()], (1, 0), "add_diagonal"
        ),
    }


sample_inputs = TestSamples.sample_inputs


@pytest.mark.cuda
def test_kernels_match_cpu_on_cuda():
    m = torch.randn(2, 4, 4, dtype=D)
    torch.testing.assert_close(
        ops.add_diagonal(m.cuda(), 2.5).cpu(), ops.add_diagonal(m, 2.5), rtol=0, atol=0
    )
    torch.testing.assert_close(ops.scale(m.cuda(), 2.5).cpu(), ops.scale(m, 2.5), rtol=0, atol=0)
    ints = torch.arange(16).reshape(4, 4)
    torch.testing.assert_close(
        ops.add_diagonal(ints.cuda(), 3).cpu(), ints + 3 * torch.eye(4, dtype=torch.long)
    )
    d = ScalarTensor(4, 2.0, dtype=D, device="cuda")
    torch.testing.assert_close((d @ m[0].cuda()).cpu(), 2.0 * m[0])
