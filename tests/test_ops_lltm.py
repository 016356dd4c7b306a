"""tensortools.ops.lltm against the plain-PyTorch reference, and its error handling."""

import pytest
import torch
from _support.lltm_cases import (
    NAMES,
    cell_backward_reference,
    cell_forward_reference,
    compare,
    make_args,
    random_grads,
    run,
)
from _support.op_records import CompileCall, ErrorCall, Transform
from _support.op_samples import (
    FLOATING,
    HALF_TOLERANCE,
    D,
    OperatorTests,
    T,
    laid_out,
    make,
    requiring_grad,
    to_each,
)
from conftest import DEVICES
from hypothesis import given
from hypothesis import strategies as st

import tensortools
from tensortools import MetadataTensor, ops, reference
from tensortools.ops.lltm import lltm_from_gates

# (batch, features, state): tiny odd sizes, batch 1, batch 16 of 32 features into a state
# of 128, and a state size above 1024 that is not a power of two.
SIZES = [(3, 17, 5), (1, 17, 5), (16, 32, 128), (4, 8, 1031)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,features,state", SIZES)
def test_matches_reference_float64(batch, features, state, device):
    args = make_args(batch, features, state, device=device)
    compare(args, random_grads(batch, state, device=device), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,features,state", [(16, 32, 128), (64, 1024, 128)])
def test_float32_close_to_float64_reference(batch, features, state, device):
    # Tolerance for float32: within 1e-5 relative + 1e-5 absolute of the float64 maths,
    # i.e. a few float32 ulps after a reduction over S+F <= 1152 products.
    args = make_args(batch, features, state, device=device)
    grads = random_grads(batch, state, device=device)
    out32, grads32 = run(ops.lltm, [a.float() for a in args], [g.float() for g in grads])
    out64, grads64 = run(reference.lltm, args, grads)
    for a, b in zip(out32 + grads32, out64 + grads64):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def test_float32_accuracy_over_wide_range():
    # Row b feeds the value v_b to all three gates (input column, weights of ones) and
    # the reversed sweep to old_cell, so every activation sees -100..100, signed zeros,
    # tiny values, infinities and NaN. The fused float32 kernel must be as close to the
    # float64 maths as plain float32 PyTorch is, with NaN and infinities in the same places.
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, float("inf"), -float("inf"), float("nan")]
    values = torch.cat([torch.linspace(-100, 100, 20001), torch.tensor(special)])
    batch = values.numel()
    args = (
        values.view(batch, 1),
        torch.tensor([[0.0, 1.0]] * 3),
        torch.zeros(3),
        torch.zeros(batch, 1),
        values.flip(0).view(batch, 1).clone(),
    )
    fused = ops.lltm(*args)
    plain32 = reference.lltm(*args)
    exact = reference.lltm(*(a.double() for a in args))
    for got, plain, want in zip(fused, plain32, exact):
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.isinf(), want.isinf())
        finite = want.isfinite()
        err = (got.double() - want)[finite].abs().max().item()
        plain_err = (plain.double() - want)[finite].abs().max().item()
        assert err <= 1.5 * plain_err + 1e-7, (err, plain_err)


def _activation_inputs():
    """float32 values across the range: tiny to large magnitudes of both signs, a dense
    stretch around zero, and the fast maths' branch points."""
    mags = torch.logspace(-30, 1.7, 400, dtype=torch.float64)
    return torch.cat(
        [
            mags,
            -mags,
            torch.linspace(-20, 20, 4001, dtype=torch.float64),
            torch.tensor(
                [
                    0.35,
                    -0.35,
                    0.625,
                    -0.625,
                    0.0,
                    -0.0,
                    9.5,
                    -9.5,
                    30.0,
                    -30.0,
                    100.0,
                    -100.0,
                    1e30,
                    -1e30,
                ]
            ),
        ]
    ).float()


def _isolated(gate_weights, bias, old_cell):
    """LLTM on rows that each feed one value v (one input feature) through the chosen
    gates: gate_weights says which of (i, o, c) see v, bias sets the rest."""
    v = _activation_inputs()
    batch = v.numel()
    weights = torch.tensor([[0.0, w] for w in gate_weights])
    args = (
        v.view(batch, 1),
        weights,
        torch.tensor(bias),
        torch.zeros(batch, 1),
        v.view(batch, 1).clone() if old_cell == "v" else torch.zeros(batch, 1),
    )
    return ops.lltm(*args), reference.lltm(*(a.double() for a in args))


@pytest.mark.parametrize("activation", ["tanh", "elu", "sigmoid"])
def test_float32_activations_elementwise_accuracy(activation):
    # Each activation alone, every element within a few float32 ulp (relative) of the
    # float64 maths on the same float32 inputs; subnormal results absolutely.
    if activation == "tanh":  # new_h = tanh(old_cell) * sigmoid(100), sigmoid(100) = 1
        (got, _), (want, _) = _isolated((0, 0, 0), [100.0, 100.0, 0.0], "v")
    elif activation == "elu":  # new_cell = elu(v) * sigmoid(100)
        (_, got), (_, want) = _isolated((0, 0, 1), [100.0, 100.0, 0.0], "zero")
    else:  # new_cell = elu(1) * sigmoid(v) = sigmoid(v)
        (_, got), (_, want) = _isolated((1, 0, 0), [0.0, 0.0, 1.0], "zero")
    torch.testing.assert_close(got.double(), want, rtol=4e-7, atol=1e-37)


def test_float32_saturation_is_exact():
    v = torch.tensor([[9.5], [-9.5], [50.0], [float("inf")], [-float("inf")]])
    args = (
        torch.zeros(5, 1),
        torch.zeros(3, 2),
        torch.tensor([100.0, 100.0, 0.0]),
        torch.zeros(5, 1),
        v,
    )
    new_h, _ = ops.lltm(*args)  # tanh(v) exactly +-1 where float rounds it so
    assert new_h.flatten().tolist() == [1.0, -1.0, 1.0, 1.0, -1.0]
    # sigmoid of a very negative gate is 0 (not stuck at a tiny constant)
    args = (
        torch.full((1, 1), -200.0),
        torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
        torch.tensor([0.0, 0.0, 1.0]),
        torch.zeros(1, 1),
        torch.zeros(1, 1),
    )
    assert ops.lltm(*args)[1].item() == 0.0


@given(
    batch=st.integers(0, 9),
    features=st.integers(1, 12),
    state=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_random_shapes_match_reference(batch, features, state, seed):
    torch.manual_seed(seed)
    args = make_args(batch, features, state)
    compare(args, random_grads(batch, state), rtol=1e-10, atol=1e-12)


def test_extreme_values_match_reference():
    # Saturated gates (|x| large), exact zeros, and a mix of signs in the candidate cell.
    args = list(make_args(4, 6, 7))
    args[2] = torch.tensor(
        [-80.0, -1e-300, 0.0, 1e-300, 50.0, 700.0, -700.0] * 3, dtype=torch.float64
    )
    compare(tuple(args), random_grads(4, 7), rtol=1e-10, atol=1e-12)


def test_nan_propagates_like_reference():
    args = list(make_args(2, 3, 4))
    args[0] = args[0].clone()
    args[0][1, 0] = float("nan")
    new_h, new_cell = ops.lltm(*args)
    ref_h, ref_cell = reference.lltm(*args)
    torch.testing.assert_close(new_h, ref_h, equal_nan=True)
    torch.testing.assert_close(new_cell, ref_cell, equal_nan=True)
    assert new_h[1].isnan().all() and not new_h[0].isnan().any()


def test_gradcheck():
    args = make_args(3, 5, 4, requires_grad=True)
    assert torch.autograd.gradcheck(ops.lltm, args)


def test_double_backward_is_refused():
    args = make_args(2, 3, 4, requires_grad=True)
    (g,) = torch.autograd.grad(ops.lltm(*args)[0].sum(), args[0], create_graph=True)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        g.sum().backward()


def test_only_one_output_used():
    # Autograd hands the backward zeros for the unused output.
    args = make_args(3, 5, 4, requires_grad=True)
    (ops.lltm(*args)[1] * 2).sum().backward()
    ref_args = tuple(a.detach().requires_grad_() for a in args)
    (reference.lltm(*ref_args)[1] * 2).sum().backward()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad)


# (batch, features, state): with one row, or no features, blocks of d_X are contiguous
# views, which the backward must still return as tensors of their own.
OPCHECK_SIZES = [(3, 5, 4), (1, 3, 4), (3, 0, 4), (0, 2, 3)]


@pytest.mark.parametrize("batch,features,state", OPCHECK_SIZES)
@pytest.mark.slow
def test_opcheck_forward(batch, features, state):
    args = make_args(batch, features, state, requires_grad=True)
    torch.library.opcheck(torch.ops.tensortools.lltm_forward.default, args)


@pytest.mark.parametrize("batch,features,state", OPCHECK_SIZES)
@pytest.mark.slow
def test_opcheck_backward(batch, features, state):
    args = make_args(batch, features, state)
    _, new_cell, gates, X = torch.ops.tensortools.lltm_forward(*args)
    grads = random_grads(batch, state)
    torch.library.opcheck(
        torch.ops.tensortools.lltm_backward.default, (*grads, new_cell, gates, X, args[1])
    )


def test_gradients_do_not_share_storage():
    args = make_args(1, 3, 4, requires_grad=True)
    sum(t.sum() for t in ops.lltm(*args)).backward()
    storages = {a.grad.untyped_storage().data_ptr() for a in args}
    assert len(storages) == len(args)


def test_fake_kernels_check_like_the_kernels():
    meta = [t.to("meta") for t in _good]
    assert [o.shape for o in ops.lltm(*meta)] == [(B, S), (B, S)]
    with pytest.raises(ValueError, match="'old_cell' must have shape"):
        ops.lltm(*meta[:4], meta[4][:, :2])
    with pytest.raises(ValueError, match="'bias' must have shape"):
        ops.lltm(meta[0], meta[1], meta[2][:3], *meta[3:])
    with pytest.raises(TypeError, match="'weights' must have the same dtype as 'input'"):
        ops.lltm(meta[0], meta[1].float(), *meta[2:])
    with pytest.raises(ValueError, match="'old_h' must be on the same device as 'input'"):
        ops.lltm(*meta[:3], _good[3], meta[4])
    with pytest.raises(TypeError, match="'input' must have dtype Float, Double, Half or BFloat16"):
        ops.lltm(*[t.long() for t in meta])


def test_compile_reports_bad_input_clearly():
    compiled = torch.compile(ops.lltm, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="'input' must be 2-D"):
        compiled(_good[0][0], *_good[1:])


def test_forward_outputs_for_backward_are_not_differentiable():
    args = make_args(3, 5, 4, requires_grad=True)
    new_h, _, gates, X = torch.ops.tensortools.lltm_forward(*args)
    assert new_h.requires_grad
    assert not gates.requires_grad and not X.requires_grad


def test_compile_fullgraph_op():
    args = make_args(4, 6, 5)
    compiled = torch.compile(ops.lltm, fullgraph=True, backend="aot_eager")
    for a, b in zip(compiled(*args), ops.lltm(*args)):
        torch.testing.assert_close(a, b)


def _strided_variants(batch, features, state):
    """Same values as make_args, laid out non-contiguous, transposed and expanded."""
    dense = make_args(batch, features, state)
    input_t = dense[0].t().contiguous().t()  # transposed storage
    weights_t = dense[1].t().contiguous().t()
    bias_e = torch.randn(1, dtype=torch.float64).expand(3 * state)  # stride 0
    wide_h = torch.randn(batch, 2 * state, dtype=torch.float64)
    wide_h[:, ::2] = dense[3]
    old_h_s = wide_h[:, ::2]  # every other column
    old_cell_e = dense[4][:1].expand(batch, state)  # one row repeated
    strided = (input_t, weights_t, bias_e, old_h_s, old_cell_e)
    contiguous = tuple(t.contiguous() for t in strided)
    assert not any(t.is_contiguous() for t in strided)
    return strided, contiguous


def test_non_contiguous_inputs_and_grads():
    batch, state = 5, 6
    strided, contiguous = _strided_variants(batch, 7, state)
    grads_e = (
        torch.randn(1, state, dtype=torch.float64).expand(batch, state),
        torch.randn(batch, 1, dtype=torch.float64).expand(batch, state),
    )
    grads_c = tuple(g.contiguous() for g in grads_e)
    out_s, g_s = run(ops.lltm, strided, grads_e)
    out_c, g_c = run(ops.lltm, contiguous, grads_c)
    for a, b in zip(out_s + g_s, out_c + g_c):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    compare(strided, grads_e, rtol=1e-10, atol=1e-12)


def test_sum_backward_gradients_are_expanded():
    # h.sum() hands the backward an expanded (stride 0) gradient.
    args = make_args(4, 3, 5, requires_grad=True)
    new_h, new_cell = ops.lltm(*args)
    (new_h.sum() + new_cell.sum()).backward()
    ref_args = tuple(a.detach().requires_grad_() for a in args)
    ref_h, ref_cell = reference.lltm(*ref_args)
    (ref_h.sum() + ref_cell.sum()).backward()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-10, atol=1e-12)


def test_zero_batch_gives_empty_results_and_zero_parameter_grads():
    args = make_args(0, 4, 3, requires_grad=True)
    new_h, new_cell = ops.lltm(*args)
    assert new_h.shape == (0, 3) and new_cell.shape == (0, 3)
    (new_h.sum() + new_cell.sum()).backward()
    assert args[0].grad.shape == (0, 4)
    assert torch.equal(args[1].grad, torch.zeros_like(args[1]))
    assert torch.equal(args[2].grad, torch.zeros_like(args[2]))


# --- bad input -------------------------------------------------------------------------

B, F, S = 4, 3, 5
_good = make_args(B, F, S)


def _with(index, value):
    args = list(_good)
    args[index] = value
    return args


WRONG_SHAPES = [
    # (argument index, bad tensor, words the message must contain)
    (0, torch.randn(B, dtype=torch.float64), "'input' must be 2-D"),
    (0, torch.randn(B, F, 1, dtype=torch.float64), "'input' must be 2-D"),
    (0, torch.randn(B + 1, F, dtype=torch.float64), "'old_h' has batch size 4 but 'input' has 5"),
    (1, torch.randn(3 * S, dtype=torch.float64), "'weights' must have shape [15, 8]"),
    (1, torch.randn(3 * S, S + F + 1, dtype=torch.float64), "'weights' must have shape"),
    (2, torch.randn(3 * S, 1, dtype=torch.float64), "'bias' must have shape [15]"),
    (2, torch.randn(S, dtype=torch.float64), "'bias' must have shape [15]"),
    (3, torch.randn(B, dtype=torch.float64), "'old_h' must be 2-D"),
    (3, torch.randn(B - 1, S, dtype=torch.float64), "'old_h' has batch size 3 but 'input' has 4"),
    (4, torch.randn(B, S + 1, dtype=torch.float64), "'old_cell' must have shape [4, 5]"),
    (4, torch.randn(B * S, dtype=torch.float64), "'old_cell' must have shape [4, 5]"),
]


@pytest.mark.parametrize(
    "index,bad,words",
    WRONG_SHAPES,
    ids=[f"{NAMES[i]}-{tuple(t.shape)}" for i, t, _ in WRONG_SHAPES],
)
def test_wrong_shape_names_the_argument(index, bad, words):
    with pytest.raises(ValueError) as info:
        ops.lltm(*_with(index, bad))
    assert words in str(info.value)


@pytest.mark.parametrize("index", range(1, 5), ids=NAMES[1:])
def test_mismatched_dtype_names_the_argument(index):
    with pytest.raises(
        TypeError,
        match=f"'{NAMES[index]}' must have the same dtype as "
        r"'input' \(Double\), got Float",
    ):
        ops.lltm(*_with(index, _good[index].float()))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_unsupported_dtype(dtype):
    with pytest.raises(
        TypeError, match="'input' must have dtype Float, Double, Half or BFloat16 on cpu"
    ):
        ops.lltm(*[a.to(dtype) for a in _good])


@pytest.mark.parametrize("index", range(5), ids=NAMES)
def test_non_tensor_argument(index):
    with pytest.raises(TypeError, match=f"'{NAMES[index]}' must be a torch.Tensor, got list"):
        ops.lltm(*_with(index, _good[index].tolist()))


def test_sparse_argument():
    with pytest.raises(TypeError, match="'weights' must be a dense"):
        ops.lltm(*_with(1, _good[1].to_sparse()))


def test_backward_op_checks_its_arguments():
    _, new_cell, gates, X = torch.ops.tensortools.lltm_forward(*_good)
    grads = random_grads(B, S)
    with pytest.raises(ValueError, match=r"'gates' must have shape \[4, 15\]"):
        torch.ops.tensortools.lltm_backward(*grads, new_cell, gates[:, :S], X, _good[1])
    with pytest.raises(TypeError, match="'grad_h' must have the same dtype as 'new_cell'"):
        torch.ops.tensortools.lltm_backward(
            grads[0].float(), grads[1], new_cell, gates, X, _good[1]
        )


# --- devices ---------------------------------------------------------------------------


@pytest.mark.skipif(tensortools.with_cuda, reason="this build has CUDA kernels")
def test_cuda_tensors_on_cpu_only_build_give_clear_error():
    # Send the arguments to the CUDA kernel directly: it needs no GPU to answer.
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with pytest.raises(RuntimeError, match="tensortools was built without CUDA"):
        torch.ops.tensortools.lltm_forward.default.redispatch(cuda, *_good)


# --- overriding ------------------------------------------------------------------------


class Recorder:
    """A user type with __torch_function__ that records what reaches it."""

    calls = []

    def __init__(self, tensor):
        self.tensor = tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append((func, types))
        unwrapped = [a.tensor if isinstance(a, Recorder) else a for a in args]
        return tuple(Recorder(t) for t in func(*unwrapped, **(kwargs or {})))


@pytest.mark.parametrize("index", range(5), ids=NAMES)
def test_user_type_intercepts_lltm(index):
    Recorder.calls.clear()
    new_h, new_cell = ops.lltm(*_with(index, Recorder(_good[index])))
    assert len(Recorder.calls) == 1
    func, types = Recorder.calls[0]
    assert func is ops.lltm and Recorder in types
    ref_h, ref_cell = reference.lltm(*_good)
    torch.testing.assert_close(new_h.tensor, ref_h)
    torch.testing.assert_close(new_cell.tensor, ref_cell)


# --- samples of the raw operators, and the checks every operator's samples go through ---


def _lltm_forward_samples(layout, dtype, device):
    B, F, S = (0 if layout == "empty" else 3), 5, 4
    shapes = [(B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]
    return [tuple(requiring_grad(*(make(s, layout, dtype, device) for s in shapes)))]


def _lltm_backward_samples(layout, dtype, device):
    (args,) = _lltm_forward_samples("empty" if layout == "empty" else "contiguous", dtype, device)
    _, new_cell, gates, X = T.lltm_forward(*args)
    grads = [make(new_cell.shape, layout, dtype, device) for _ in range(2)]
    return [
        (
            *grads,
            new_cell.detach(),
            laid_out(gates, layout),
            laid_out(X, layout),
            laid_out(args[1], layout),
        )
    ]


def _lltm_backward_reference(grad_h, grad_cell, new_cell, gates, X, weights):
    """(d_input, d_weights, d_bias, d_old_h, d_old_cell)."""
    S = new_cell.shape[1]
    d_gates, d_old_cell = cell_backward_reference(grad_h, grad_cell, new_cell, gates)
    d_X = d_gates @ weights
    return d_X[:, S:], d_gates.t() @ X, d_gates.sum(0), d_X[:, :S], d_old_cell


def _gates_forward_samples(layout, dtype, device):
    B, S = (0 if layout == "empty" else 3), 4
    # pre-activation gates on both sides of elu's kink and far out in sigmoid's tails
    gates = make((B, 3 * S), layout, dtype, device, scale=3.0)
    return [tuple(requiring_grad(gates, make((B, S), layout, dtype, device)))]


def _gates_backward_samples(layout, dtype, device):
    (args,) = _gates_forward_samples("empty" if layout == "empty" else "contiguous", dtype, device)
    _, new_cell, activated = T.lltm_gates_forward(*args)
    grads = [make(new_cell.shape, layout, dtype, device) for _ in range(2)]
    return [(*grads, laid_out(new_cell, layout), laid_out(activated, layout))]


def _gates_forward_reference(gates, old_cell):
    """lltm_gates_forward's (new_h, new_cell, activated): the cell's pointwise maths."""
    i, o, c = gates.chunk(3, dim=-1)
    ig, og, cc = torch.sigmoid(i), torch.sigmoid(o), torch.nn.functional.elu(c)
    new_cell = old_cell + cc * ig
    return torch.tanh(new_cell) * og, new_cell, torch.cat([ig, og, cc], dim=-1)


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
SAMPLE_BUILDERS = {
    "lltm_forward": _lltm_forward_samples,
    "lltm_backward": _lltm_backward_samples,
    "lltm_gates_forward": _gates_forward_samples,
    "lltm_gates_backward": _gates_backward_samples,
}


# --- its cases of the sweeps over every operator (_support/op_records.py) ---

_W, _H = torch.randn(9, 6, dtype=D), torch.zeros(4, 3, dtype=D)
#: batch 3, features 4, state 2: input, weights, bias, old_h, old_cell
_TRANSFORM_SHAPES = [(3, 4), (6, 6), (6,), (3, 2), (3, 2)]


class TestSamples(OperatorTests):
    """The LLTM cell's operators against their plain-PyTorch maths, gradients, opcheck and
    meta kernels; lltm's cases of the sweeps over every operator."""

    builders = SAMPLE_BUILDERS
    references = {
        "lltm_forward": cell_forward_reference,
        "lltm_backward": _lltm_backward_reference,
        "lltm_gates_forward": _gates_forward_reference,
        "lltm_gates_backward": cell_backward_reference,
    }
    # The LLTM's kernels take the half types on the CPU too (computing in float32).
    dtypes = dict.fromkeys(references, dict.fromkeys(("cpu", "cuda"), FLOATING["cuda"]))
    no_derivative = dict.fromkeys(
        ("lltm_backward", "lltm_gates_backward"),
        r"tensortools\.ops\.lltm does not support double backward",
    )
    error_calls = {
        "lltm": ErrorCall(
            ops.lltm,
            lambda: dict(
                input=make((2, 3)),
                weights=make((12, 7)),
                bias=make((12,)),
                old_h=make((2, 4)),
                old_cell=make((2, 4)),
            ),
            reference.lltm,
        )
    }
    autocast_elsewhere = {"lltm": ("test_lltm_autocast.py", "nn.LLTM(")}
    compile_calls = {
        "lltm": CompileCall(
            lambda x: ops.lltm(x, _W, torch.zeros(9, dtype=_W.dtype), _H, _H),
            lambda: (MetadataTensor(torch.randn(4, 3, dtype=D), metadata={"k": 1}),),
        )
    }
    transforms = {
        "lltm": Transform(
            ops.lltm,
            reference.lltm,
            _TRANSFORM_SHAPES,
            (0, None, None, 0, 0),
            "lltm",
            no_double_backward=True,
        ),
        # (the pointwise pass ScalarTensor's lltm handler calls on the gates it forms)
        "lltm_from_gates": Transform(
            lltm_from_gates,
            lambda gates, old_cell: _gates_forward_reference(gates, old_cell)[:2],
            [(3, 6), (3, 2)],
            (0, 0),
            "lltm",
            no_double_backward=True,
        ),
        "lltm_weights": Transform(
            ops.lltm,
            reference.lltm,
            _TRANSFORM_SHAPES,
            (None, 0, None, 0, None),
            "lltm",
            no_double_backward=True,
        ),
    }


sample_inputs = TestSamples.sample_inputs


# --- more devices and refusals -------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("size", [(3, 17, 5), (16, 32, 128), (1, 4, 1031)])
@pytest.mark.parametrize("dtype", [torch.float32, D])
def test_lltm_cuda_matches_cpu_forward_and_backward(size, dtype):
    cpu = [a.to(dtype).requires_grad_() for a in make_args(*size)]
    gpu = [a.detach().cuda().requires_grad_() for a in cpu]
    grads = [torch.randn(size[0], size[2], dtype=dtype) for _ in range(2)]
    out_c = ops.lltm(*cpu)
    out_g = ops.lltm(*gpu)
    d_c = torch.autograd.grad(out_c, cpu, grads)
    d_g = torch.autograd.grad(out_g, gpu, [g.cuda() for g in grads])
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    for a, b in zip(out_g + d_g, out_c + d_c):
        torch.testing.assert_close(a.cpu(), b, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_lltm_half_types_against_float64(dtype, device):
    args = make_args(64, 32, 128)
    want = reference.lltm(*args)
    got = ops.lltm(*to_each(args, dtype=dtype, device=device))
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 4, err


@pytest.mark.cuda
def test_lltm_batch_beyond_grid_limit():
    # more rows than a grid's y dimension could hold: the grid-stride loop covers them
    args = make_args(70000, 3, 4, dtype=torch.float32, device="cuda")
    got = ops.lltm(*args)
    want = reference.lltm(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
def test_argument_on_the_wrong_device_is_named():
    args = list(make_args(2, 3, 4, device="cuda"))
    args[3] = args[3].cpu()
    with pytest.raises(ValueError, match="'old_h' must be on the same device as 'input'"):
        ops.lltm(*args)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_argument_on_another_gpu_is_named():
    args = list(make_args(2, 3, 4, device="cuda:0"))
    args[1] = args[1].to("cuda:1")
    with pytest.raises(ValueError, match="'weights' must be on the same device as 'input'"):
        ops.lltm(*args)


@pytest.mark.cuda
def test_kernels_run_on_a_side_stream_and_current_device():
    args = make_args(8, 4, 6, dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = ops.lltm(*args)
    stream.synchronize()
    for g, w in zip(got, reference.lltm(*args)):
        torch.testing.assert_close(g, w)
