"""tensortools.ops.lltm_sequence and nn.LLTMSequence against the reference loop, and their
error handling, compilation and behaviour on the tensor types."""

import contextlib
import subprocess
import sys
import threading

import pytest
import torch
from _support.lltm_cases import (
    SEQUENCE_NAMES,
    cell_backward_reference,
    cell_forward_reference,
    compare_sequence,
    make_sequence_args,
    run_sequence,
    sequence_grads,
)
from _support.op_records import CompileCall, ErrorCall, Transform
from _support.op_samples import (
    FLOATING,
    HALF_TOLERANCE,
    LAYOUTS,
    D,
    OperatorTests,
    laid_out,
    make,
    requiring_grad,
    to_each,
)
from conftest import DEVICES
from hypothesis import given
from hypothesis import strategies as st

from tensortools import (
    LoggingTensor,
    MetadataTensor,
    ScalarTensor,
    capture_logs,
    nn,
    ops,
    reference,
)

T_OPS = torch.ops.tensortools

# (steps, batch, features, state): no step, one step, batch 1, no features, state 1, the
# tutorial cell over 32 steps, and a state above 1024 that is not a power of two.
SIZES = [
    (0, 3, 4, 5),
    (1, 3, 4, 5),
    (6, 1, 7, 5),
    (5, 3, 0, 4),
    (7, 2, 3, 1),
    (32, 16, 32, 128),
    (3, 2, 5, 1031),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("steps,batch,features,state", SIZES)
def test_matches_reference_loop_float64(steps, batch, features, state, device):
    args = make_sequence_args(steps, batch, features, state, device=device)
    grads = sequence_grads(steps, batch, state, device=device)
    compare_sequence(args, grads, rtol=1e-10, atol=1e-12)


@given(
    steps=st.integers(0, 6),
    batch=st.integers(0, 5),
    features=st.integers(0, 6),
    state=st.integers(1, 6),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_random_shapes_match_reference_loop(steps, batch, features, state, seed):
    torch.manual_seed(seed)
    args = make_sequence_args(steps, batch, features, state)
    compare_sequence(args, sequence_grads(steps, batch, state), rtol=1e-10, atol=1e-12)


def test_equals_applying_the_fused_cell_step_by_step():
    # The same maths as T calls of ops.lltm: forward and all gradients.
    def cell_loop(input, weights, bias, h, c):
        outputs = []
        for x in input.unbind(0):
            h, c = ops.lltm(x, weights, bias, h, c)
            outputs.append(h)
        return torch.stack(outputs), h, c

    args = make_sequence_args(9, 4, 6, 5)
    grads = sequence_grads(9, 4, 5)
    got = run_sequence(ops.lltm_sequence, args, grads)
    want = run_sequence(cell_loop, args, grads)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_gradcheck():
    args = make_sequence_args(4, 3, 2, 3, requires_grad=True)
    assert torch.autograd.gradcheck(ops.lltm_sequence, args)


def test_gradcheck_no_steps_and_one_step():
    for steps in (0, 1):
        args = make_sequence_args(steps, 2, 3, 2, requires_grad=True)
        assert torch.autograd.gradcheck(ops.lltm_sequence, args)


@pytest.mark.parametrize("size", [(32, 16, 32, 128), (8, 64, 1024, 128)])
@pytest.mark.slow
def test_float32_close_to_float64(size):
    # The float32 op is as close to the float64 maths as the float32 reference loop is
    # (errors grow along the recurrence alike): at most 2x its error plus 1e-6.
    steps, batch, features, state = size
    args = make_sequence_args(*size)
    grads = sequence_grads(steps, batch, state)
    exact = run_sequence(reference.lltm_sequence, args, grads)
    as32 = ([a.float() for a in args], [g.float() for g in grads])
    fused = run_sequence(ops.lltm_sequence, *as32)
    plain = run_sequence(reference.lltm_sequence, *as32)
    names = ("output", "h_n", "c_n") + tuple(f"grad {n}" for n in SEQUENCE_NAMES)
    for name, got, ref32, want in zip(names, sum(fused, ()), sum(plain, ()), sum(exact, ())):
        assert got.dtype == torch.float32
        err = (got.double() - want).abs().max().item()
        ref_err = (ref32.double() - want).abs().max().item()
        assert err <= 2 * ref_err + 1e-6, (name, err, ref_err)


def test_special_values_propagate_like_the_reference():
    args = [a.clone() for a in make_sequence_args(4, 3, 2, 3)]
    args[0][1, 0, 0] = float("nan")  # step 1, row 0: NaN from there on, in that row only
    args[0][2, 2, 1] = float("inf")
    got = ops.lltm_sequence(*args)
    want = reference.lltm_sequence(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-10, atol=1e-12)
    assert got[0][1:, 0].isnan().all() and not got[0][:, 1].isnan().any()


def test_each_output_alone_carries_its_gradient():
    # Outputs that do not reach the loss get no gradient from autograd: they count as zero.
    args = make_sequence_args(5, 3, 4, 2)
    for used in range(3):
        grads = [torch.zeros(o.shape, dtype=torch.float64) for o in ops.lltm_sequence(*args)]
        grads[used] = torch.randn_like(grads[used])
        leaves = tuple(a.detach().requires_grad_() for a in args)
        got = torch.autograd.grad((ops.lltm_sequence(*leaves)[used] * grads[used]).sum(), leaves)
        _, want = run_sequence(reference.lltm_sequence, args, grads)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("wanted", [(3,), (1, 2), (0, 3, 4), (4,)])
def test_gradients_of_a_subset_of_arguments(wanted):
    # Only the arguments that require grad get one (the input of a sequence model seldom
    # does): the backward leaves out the products of the others, and the rest agree.
    args = make_sequence_args(5, 3, 4, 2)
    grads = sequence_grads(5, 3, 2)
    leaves = [a.detach().requires_grad_(i in wanted) for i, a in enumerate(args)]
    outs = ops.lltm_sequence(*leaves)
    sum((o * g).sum() for o, g in zip(outs, grads)).backward()
    _, want = run_sequence(reference.lltm_sequence, args, grads)
    for i, (leaf, w) in enumerate(zip(leaves, want)):
        if i in wanted:
            torch.testing.assert_close(leaf.grad, w, rtol=1e-10, atol=1e-12)
        else:
            assert leaf.grad is None


def test_backward_operator_leaves_out_unwanted_gradients():
    args = make_sequence_args(4, 2, 3, 5)
    output, h_n, c_n, cells, gates = T_OPS.lltm_sequence_forward(*args)
    grads = sequence_grads(4, 2, 5)
    saved = (args[0], args[1], args[3], output, cells, gates)
    full = T_OPS.lltm_sequence_backward(*grads, *saved, [True, True, True])
    part = T_OPS.lltm_sequence_backward(*grads, *saved, [False, True, False])
    assert part[0] is None and part[2] is None
    for got, want in zip(part[1:], full[1:]):
        if got is not None:
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_state_buffers_may_be_reused_before_backward():
    # Truncated backpropagation through time reuses the state tensors: writing the new
    # cell into c0's buffer must not disturb the gradients (the backward does not need c0).
    args = make_sequence_args(4, 3, 2, 5)
    grads = sequence_grads(4, 3, 5)
    _, want = run_sequence(reference.lltm_sequence, args, grads)
    leaves = [a.clone().requires_grad_(i in (1, 2)) for i, a in enumerate(args)]
    outs = ops.lltm_sequence(*leaves)
    leaves[4].copy_(outs[2].detach())
    sum((o * g).sum() for o, g in zip(outs, grads)).backward()
    torch.testing.assert_close((leaves[1].grad, leaves[2].grad), want[1:3], rtol=1e-10, atol=1e-12)


def test_changing_a_saved_result_in_place_is_caught():
    # output is saved for backward: an in-place change before backward must raise, not
    # give gradients of other values.
    args = make_sequence_args(3, 2, 3, 4, requires_grad=True)
    output, _, _ = ops.lltm_sequence(*args)
    loss = output.sum()
    with torch.no_grad():
        output.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_double_backward_is_refused():
    args = make_sequence_args(3, 2, 3, 4, requires_grad=True)
    (g,) = torch.autograd.grad(ops.lltm_sequence(*args)[0].sum(), args[0], create_graph=True)
    with pytest.raises(RuntimeError, match="lltm_sequence does not support double backward"):
        g.sum().backward()


def test_results_are_new_tensors():
    # h_n and c_n are tensors of their own, not views of output (or of h0, c0 for T = 0).
    for steps in (0, 3):
        args = make_sequence_args(steps, 2, 3, 4)
        output, h_n, c_n = ops.lltm_sequence(*args)
        tensors = [t for t in (output, h_n, c_n, *args) if t.numel() > 0]  # empty: no data
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)


def test_forward_outputs_for_backward_are_not_differentiable():
    args = make_sequence_args(3, 2, 3, 4, requires_grad=True)
    output, h_n, c_n, cells, gates = T_OPS.lltm_sequence_forward(*args)
    assert output.requires_grad and h_n.requires_grad and c_n.requires_grad
    assert not cells.requires_grad and not gates.requires_grad


def _strided_variants(steps, batch, features, state):
    """Same values as make_sequence_args, laid out non-contiguous: the input batch-major
    (as batch_first gives it), weights transposed, bias and c0 expanded, h0 every other
    column."""
    dense = make_sequence_args(steps, batch, features, state)
    input_t = dense[0].transpose(0, 1).contiguous().transpose(0, 1)
    weights_t = dense[1].t().contiguous().t()
    bias_e = torch.randn(1, dtype=torch.float64).expand(3 * state)
    wide_h = torch.randn(batch, 2 * state, dtype=torch.float64)
    wide_h[:, ::2] = dense[3]
    c0_e = dense[4][:1].expand(batch, state)
    strided = (input_t, weights_t, bias_e, wide_h[:, ::2], c0_e)
    assert not any(t.is_contiguous() for t in strided)
    return strided, tuple(t.contiguous() for t in strided)


def test_non_contiguous_inputs_and_grads():
    steps, batch, state = 4, 3, 5
    strided, contiguous = _strided_variants(steps, batch, 6, state)
    grads_e = (
        torch.randn(1, 1, state, dtype=torch.float64).expand(steps, batch, state),
        torch.randn(batch, 1, dtype=torch.float64).expand(batch, state),
        torch.randn(state, batch, dtype=torch.float64).t(),
    )
    grads_c = tuple(g.contiguous() for g in grads_e)
    got = run_sequence(ops.lltm_sequence, strided, grads_e)
    want = run_sequence(ops.lltm_sequence, contiguous, grads_c)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    compare_sequence(strided, grads_e, rtol=1e-10, atol=1e-12)


def test_sum_backward_gradients_are_expanded():
    args = make_sequence_args(4, 3, 2, 5, requires_grad=True)
    sum(t.sum() for t in ops.lltm_sequence(*args)).backward()
    ref_args = tuple(a.detach().requires_grad_() for a in args)
    sum(t.sum() for t in reference.lltm_sequence(*ref_args)).backward()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-10, atol=1e-12)


def test_threads_running_at_once_agree_with_one_thread():
    cases = [make_sequence_args(6, 4, 5, 7) for _ in range(4)]
    want = [ops.lltm_sequence(*args) for args in cases]
    got = [None] * len(cases)
    start = threading.Barrier(len(cases))

    def work(i):
        start.wait()
        for _ in range(20):
            got[i] = ops.lltm_sequence(*cases[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# --- torch.compile -------------------------------------------------------------------------


def _graph_ops(fn, *args):
    """Call targets of the FX graphs torch.compile(fullgraph=True) builds for fn (and the
    values it returns)."""
    targets = []

    def backend(gm, example_inputs):
        targets.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm

    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=backend)(*args), targets


@pytest.mark.parametrize("requires_grad", [True, False])
def test_compile_fullgraph_is_one_operator_node(requires_grad):
    args = make_sequence_args(5, 3, 4, 6, requires_grad=requires_grad)
    got, targets = _graph_ops(ops.lltm_sequence, *args)
    computing = [t for t in targets if t is not __import__("operator").getitem]
    op = T_OPS.lltm_sequence_forward if requires_grad else T_OPS.lltm_sequence_inference
    assert computing == [op.default], targets
    torch.testing.assert_close(got, ops.lltm_sequence(*args), rtol=0, atol=0)


@pytest.mark.slow
def test_compiled_training_step_matches_eager():
    def step(input, weights, bias, h0, c0):
        output, h_n, c_n = ops.lltm_sequence(input, weights, bias, h0, c0)
        return output.square().mean() + h_n.sum() * c_n.mean()

    args = make_sequence_args(6, 3, 4, 5)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for steps in (6, 6, 9):  # the third call has another T
        args = make_sequence_args(steps, 3, 4, 5)
        leaves = [a.detach().requires_grad_() for a in args]
        want = torch.autograd.grad(step(*leaves), leaves)
        got = torch.autograd.grad(compiled(*leaves), leaves)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_compile_reports_bad_input_clearly():
    args = make_sequence_args(3, 2, 3, 4)
    compiled = torch.compile(ops.lltm_sequence, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="'input' must be 3-D"):
        compiled(args[0][0], *args[1:])


# --- the module ----------------------------------------------------------------------------


def test_module_matches_reference_loop_and_takes_a_cells_state_dict():
    cell = nn.LLTM(4, 6).double()
    layer = nn.LLTMSequence(4, 6).double()
    layer.load_state_dict(cell.state_dict())  # strict: the same parameters
    cell.load_state_dict(layer.state_dict())
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    h, c = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    output, (h_n, c_n) = layer(x, (h, c))
    want = reference.lltm_sequence(x, cell.weights, cell.bias, h, c)
    torch.testing.assert_close((output, h_n, c_n), want, rtol=1e-10, atol=1e-12)
    state = (h, c)
    for t in range(5):
        state = cell(x[t], state)
    torch.testing.assert_close((h_n, c_n), state, rtol=1e-10, atol=1e-12)


def test_module_state_defaults_to_zeros():
    layer = nn.LLTMSequence(3, 4).double()
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    zeros = torch.zeros(2, 4, dtype=torch.float64)
    got = layer(x)
    want = layer(x, (zeros, zeros))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_module_batch_first():
    layer = nn.LLTMSequence(3, 4, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)  # batch x time x features
    output, (h_n, c_n) = layer(x)
    assert output.shape == (2, 5, 4)
    zeros = torch.zeros(2, 4, dtype=torch.float64)
    ref = reference.lltm_sequence(x.transpose(0, 1), layer.weights, layer.bias, zeros, zeros)
    torch.testing.assert_close((output.transpose(0, 1), h_n, c_n), ref, rtol=1e-10, atol=1e-12)
    (g,) = torch.autograd.grad(output.sum() + c_n.sum(), x)
    (g_ref,) = torch.autograd.grad(ref[0].sum() + ref[2].sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)
    assert "batch_first=True" in repr(layer)


@pytest.mark.slow
def test_module_compiles_fullgraph():
    layer = nn.LLTMSequence(3, 4, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), layer(x), rtol=0, atol=0)


def test_module_refuses_bad_arguments():
    with pytest.raises(ValueError, match="LLTMSequence: 'state_size' must be positive"):
        nn.LLTMSequence(3, 0)
    with pytest.raises(TypeError, match="'batch_first' must be a bool"):
        nn.LLTMSequence(3, 4, batch_first=1)
    layer = nn.LLTMSequence(3, 4, batch_first=True)
    with pytest.raises(ValueError, match=r"'input' must be 3-D \(batch x time x features\)"):
        layer(torch.randn(5, 3))
    with pytest.raises(TypeError, match="'input' must be a torch.Tensor, got list"):
        layer([[1.0, 2.0, 3.0]])
    with pytest.raises(TypeError, match="'state' must be a pair"):
        layer(torch.randn(2, 5, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="'h0' has batch size 3 but 'input' has 2"):
        layer(torch.randn(2, 5, 3), (torch.zeros(3, 4), torch.zeros(3, 4)))


# --- the tensor types ----------------------------------------------------------------------


def test_metadata_in_metadata_out():
    args = make_sequence_args(4, 2, 3, 5, dtype=torch.float32)
    wrapped = [MetadataTensor(args[0].clone(), {"run": 7})] + list(args[1:])
    got = ops.lltm_sequence(*wrapped)
    want = ops.lltm_sequence(*args)
    for g, w in zip(got, want):
        assert isinstance(g, MetadataTensor) and g.metadata == {"run": 7}
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w, rtol=0, atol=0)


def test_logging_tensor_logs_one_call_and_keeps_gradients():
    args = make_sequence_args(3, 2, 3, 4, dtype=torch.float32)
    logged = [LoggingTensor(a.clone()).requires_grad_() for a in args]
    with capture_logs() as logs:
        output, h_n, c_n = ops.lltm_sequence(*logged)
    assert [r.function for r in logs] == ["tensortools.ops.lltm_sequence"]
    assert all(isinstance(t, LoggingTensor) for t in (output, h_n, c_n))
    (output.sum() + c_n.sum()).backward()
    plain = [a.clone().requires_grad_() for a in args]
    out = ops.lltm_sequence(*plain)
    (out[0].sum() + out[2].sum()).backward()
    for a, b in zip(logged, plain):
        torch.testing.assert_close(a.grad.as_subclass(torch.Tensor), b.grad, rtol=0, atol=0)


def test_scalar_tensor_states_act_as_their_matrices():
    # h0 and c0 as value * I (batch = state size): the same as their dense matrices.
    S, F = 4, 3
    input, weights, bias = torch.randn(5, S, F), torch.randn(3 * S, S + F), torch.randn(3 * S)
    h0, c0 = ScalarTensor(S, 0.5), ScalarTensor(S, -1.25)
    got = ops.lltm_sequence(input, weights, bias, h0, c0)
    want = ops.lltm_sequence(input, weights, bias, h0.tensor(), c0.tensor())
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# --- bad input ------------------------------------------------------------------------------

T, B, F, S = 3, 4, 2, 5
_good = make_sequence_args(T, B, F, S)


def _with(index, value):
    args = list(_good)
    args[index] = value
    return args


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


WRONG_SHAPES = [
    # (argument index, bad tensor, words the message must contain)
    (0, _randn(B, F), "'input' must be 3-D (time x batch x features)"),
    (0, _randn(T, B, F, 1), "'input' must be 3-D"),
    (0, _randn(T, B + 1, F), "'h0' has batch size 4 but 'input' has 5"),
    (0, _randn(T, B, F + 1), "'weights' must have shape [15, 8]"),
    (1, _randn(3 * S, S + F + 1), "'weights' must have shape [15, 7]"),
    (1, _randn(3 * S), "'weights' must have shape [15, 7]"),
    (2, _randn(S), "'bias' must have shape [15]"),
    (2, _randn(3 * S, 1), "'bias' must have shape [15]"),
    (3, _randn(B), "'h0' must be 2-D (batch x state_size)"),
    (3, _randn(B - 1, S), "'h0' has batch size 3 but 'input' has 4"),
    (4, _randn(B, S + 1), "'c0' must have shape [4, 5]"),
    (4, _randn(T, B, S), "'c0' must have shape [4, 5]"),
]


@pytest.mark.parametrize(
    "index,bad,words",
    WRONG_SHAPES,
    ids=[f"{SEQUENCE_NAMES[i]}-{tuple(t.shape)}" for i, t, _ in WRONG_SHAPES],
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_wrong_shape_names_the_argument(index, bad, words, device):
    args = [a.to(device) for a in _with(index, bad)]
    with pytest.raises(ValueError) as info:
        ops.lltm_sequence(*args)
    assert words in str(info.value)


@pytest.mark.parametrize("index", range(1, 5), ids=SEQUENCE_NAMES[1:])
def test_mismatched_dtype_names_the_argument(index):
    name = SEQUENCE_NAMES[index]
    with pytest.raises(
        TypeError, match=f"'{name}' must have the same dtype as 'input' \\(Double\\), got Float"
    ):
        ops.lltm_sequence(*_with(index, _good[index].float()))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_unsupported_dtype(dtype):
    with pytest.raises(
        TypeError, match="'input' must have dtype Float, Double, Half or BFloat16 on cpu"
    ):
        ops.lltm_sequence(*[a.to(dtype) for a in _good])


@pytest.mark.parametrize("index", range(5), ids=SEQUENCE_NAMES)
def test_non_tensor_or_sparse_argument(index):
    with pytest.raises(TypeError, match=f"'{SEQUENCE_NAMES[index]}' must be a torch.Tensor"):
        ops.lltm_sequence(*_with(index, _good[index].tolist()))
    with pytest.raises(TypeError, match=f"'{SEQUENCE_NAMES[index]}' must be a dense"):
        ops.lltm_sequence(*_with(index, _good[index].to_sparse()))


def test_backward_op_checks_its_arguments():
    output, h_n, c_n, cells, gates = T_OPS.lltm_sequence_forward(*_good)
    grads = sequence_grads(T, B, S)
    rest = (_good[0], _good[1], _good[3], output, cells, gates)
    mask = [True, True, True]
    with pytest.raises(ValueError, match=r"'gates' must have shape \[3, 4, 15\]"):
        T_OPS.lltm_sequence_backward(*grads, *rest[:-1], gates[..., :S], mask)
    with pytest.raises(ValueError, match=r"'grad_output' must have shape \[3, 4, 5\]"):
        T_OPS.lltm_sequence_backward(grads[0][1:], *grads[1:], *rest, mask)
    with pytest.raises(TypeError, match="'grad_h_n' must have the same dtype as 'input'"):
        T_OPS.lltm_sequence_backward(grads[0], grads[1].float(), grads[2], *rest, mask)


@pytest.mark.slow
def test_hostile_calls_do_not_crash_the_process():
    # Mismatched saved tensors handed straight to the backward operator, and a forward
    # whose T x B overflows nothing but holds no elements: errors or results, never a crash.
    code = """
import torch, tensortools
T = torch.ops.tensortools
x, w, b = torch.randn(3, 2, 4), torch.randn(15, 9), torch.randn(15)
h, c = torch.randn(2, 5), torch.randn(2, 5)
out, h_n, c_n, cells, gates = T.lltm_sequence_forward(x, w, b, h, c)
bad = [
    (out, h_n, c_n, x, w, h, out, cells, gates[:, :1]),
    (out[:2], h_n, c_n, x, w, h, out, cells, gates),
    (out, h_n, c_n, x[:2], w, h, out, cells, gates),
    (out, h_n, c_n, x, w, h, out, cells[:, :, :2], gates),
    (out, h_n, c_n, x, w, h[:1], out, cells, gates),
    (out, h_n[:1], c_n, x, w, h, out, cells, gates),
]
for args in bad:
    try:
        T.lltm_sequence_backward(*args, [True, True, True])
    except (ValueError, TypeError):
        pass
    else:
        raise SystemExit("accepted " + repr([a.shape for a in args]))
none = torch.randn(0, 5)
empty = T.lltm_sequence_forward(torch.randn(10**9, 0, 4), w, b, none, none)
assert empty[0].shape == (10**9, 0, 5)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- samples of the raw operators, and the checks every operator's samples go through ---


def _lltm_sequence_forward_samples(layout, dtype, device):
    T, B, F, S = 4, (0 if layout == "empty" else 3), 5, 4
    shapes = [(T, B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]
    cases = [tuple(requiring_grad(*(make(s, layout, dtype, device) for s in shapes)))]
    if layout == "empty":  # no steps at all
        no_steps = (make((0, 3, F), layout, dtype, device), *cases[0][1:3])
        states = (make((3, S), layout, dtype, device), make((3, S), layout, dtype, device))
        cases.append(tuple(requiring_grad(*no_steps, *states)))
    return cases


def _lltm_sequence_backward_samples(layout, dtype, device):
    cases = []
    for args in _lltm_sequence_forward_samples(
        "empty" if layout == "empty" else "contiguous", dtype, device
    ):
        input, weights, _, h0, _ = (a.detach() for a in args)
        output, h_n, c_n, cells, gates = T_OPS.lltm_sequence_forward(*args)
        grads = [make(t.shape, layout, dtype, device) for t in (output, h_n, c_n)]
        saved = tuple(laid_out(t, layout) for t in (input, weights, h0, output.detach()))
        for mask in ([True, True, True], [False, True, False], [True, False, True]):
            cases.append((*grads, *saved, cells, laid_out(gates, layout), mask))
    return cases


def _lltm_sequence_forward_reference(input, weights, bias, h0, c0):
    """(output, h_n, c_n, cells, gates): the cell's maths step by step."""
    h, c, steps = h0, c0, []
    for x in input.unbind(0):
        h, c, gates, _ = cell_forward_reference(x, weights, bias, h, c)
        steps.append((h, c, gates))
    if not steps:
        (batch, state), empty = h0.shape, input.new_empty
        return empty(0, batch, state), h0, c0, empty(0, batch, state), empty(0, batch, 3 * state)
    output, cells, gates = (torch.stack(t) for t in zip(*steps))
    return output, h, c, cells, gates


def _lltm_sequence_backward_reference(
    grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells, gates, output_mask
):
    """(d_input, d_weights, d_bias, d_h0, d_c0), those of input, weights and bias only
    where output_mask asks: the cell's backward from the last step to the first."""
    S = h0.shape[1]
    d_h, d_c, d_gates = grad_h_n, grad_c_n, [torch.zeros_like(gates[:0])]
    for t in reversed(range(input.shape[0])):
        step, d_c = cell_backward_reference(grad_output[t] + d_h, d_c, cells[t], gates[t])
        d_h = step @ weights[:, :S]
        d_gates.insert(0, step[None])
    d_gates = torch.cat(d_gates)
    X = torch.cat([torch.cat([h0[None], output])[: input.shape[0]], input], dim=2)
    d_input = d_gates @ weights[:, S:]
    d_weights = torch.einsum("tbg,tbk->gk", d_gates, X)
    d_bias = d_gates.sum((0, 1))
    wanted = [g if m else None for g, m in zip((d_input, d_weights, d_bias), output_mask)]
    return (*wanted, d_h, d_c)


#: The torch.ops.tensortools operators this file covers, and how to make their samples.
def _lltm_sequence_inference_samples(layout, dtype, device):
    # (inputs that require no grad: the operator is for calls that want no gradient)
    return [
        tuple(a.detach() for a in args)
        for args in _lltm_sequence_forward_samples(layout, dtype, device)
    ]


def _lltm_sequence_inference_reference(input, weights, bias, h0, c0):
    return _lltm_sequence_forward_reference(input, weights, bias, h0, c0)[:3]


SAMPLE_BUILDERS = {
    "lltm_sequence_forward": _lltm_sequence_forward_samples,
    "lltm_sequence_backward": _lltm_sequence_backward_samples,
    "lltm_sequence_inference": _lltm_sequence_inference_samples,
}


# --- its cases of the sweeps over every operator (_support/op_records.py) ---

_W, _H = torch.randn(9, 6, dtype=D), torch.zeros(4, 3, dtype=D)
#: steps 3, batch 3, features 4, state 2: input, weights, bias, h0, c0
_TRANSFORM_SHAPES = [(3, 3, 4), (6, 6), (6,), (3, 2), (3, 2)]


class TestSamples(OperatorTests):
    """The LLTM sequence operators against the cell's maths step by step, gradients,
    opcheck and meta kernels; lltm_sequence's cases of the sweeps over every operator."""

    builders = SAMPLE_BUILDERS
    references = {
        "lltm_sequence_forward": _lltm_sequence_forward_reference,
        "lltm_sequence_backward": _lltm_sequence_backward_reference,
        "lltm_sequence_inference": _lltm_sequence_inference_reference,
    }
    tolerance = 16.0  # errors grow along the recurrence
    # The LLTM's kernels take the half types on the CPU too (computing in float32).
    dtypes = dict.fromkeys(references, dict.fromkeys(("cpu", "cuda"), FLOATING["cuda"]))
    no_derivative = {
        "lltm_sequence_backward": (
            r"tensortools\.ops\.lltm_sequence does not support double backward"
        ),
        # torch's own refusals, for an operator without an autograd formula
        "lltm_sequence_inference": "tensortools::lltm_sequence_inference",
    }
    error_calls = {
        "lltm_sequence": ErrorCall(
            ops.lltm_sequence,
            lambda: dict(
                input=make((3, 2, 3)),
                weights=make((12, 7)),
                bias=make((12,)),
                h0=make((2, 4)),
                c0=make((2, 4)),
            ),
            reference.lltm_sequence,
        )
    }
    autocast_elsewhere = {"lltm_sequence": ("test_lltm_autocast.py", "nn.LLTMSequence(")}
    compile_calls = {
        "lltm_sequence": CompileCall(
            lambda x: ops.lltm_sequence(x, _W, torch.zeros(9, dtype=_W.dtype), _H, _H),
            lambda: (MetadataTensor(torch.randn(5, 4, 3, dtype=D), metadata={"k": 2}),),
        )
    }
    transforms = {
        "lltm_sequence": Transform(
            ops.lltm_sequence,
            reference.lltm_sequence,
            _TRANSFORM_SHAPES,
            (1, None, None, 0, None),
            "lltm_sequence",
            no_double_backward=True,
        ),
        "lltm_sequence_bias": Transform(
            ops.lltm_sequence,
            reference.lltm_sequence,
            _TRANSFORM_SHAPES,
            (None, None, 0, None, None),
            "lltm_sequence",
            no_double_backward=True,
            slow=frozenset({"second_order"}),  # over a second (jacobians of jacobians)
        ),
    }


sample_inputs = TestSamples.sample_inputs


# --- more devices and refusals -------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("size", [(0, 3, 4, 5), (1, 3, 17, 5), (32, 16, 32, 128), (5, 2, 4, 1031)])
@pytest.mark.parametrize("dtype", [torch.float32, D])
def test_lltm_sequence_cuda_matches_cpu_forward_and_backward(size, dtype):
    steps, batch, _, state = size
    cpu = [a.to(dtype).requires_grad_() for a in make_sequence_args(*size)]
    gpu = [a.detach().cuda().requires_grad_() for a in cpu]
    out_c, out_g = ops.lltm_sequence(*cpu), ops.lltm_sequence(*gpu)
    grads = [torch.randn(o.shape, dtype=dtype) for o in out_c]

    def loss(outs, grads):
        return sum((o * g).sum() for o, g in zip(outs, grads))

    d_c = torch.autograd.grad(loss(out_c, grads), cpu, materialize_grads=True)
    d_g = torch.autograd.grad(loss(out_g, [g.cuda() for g in grads]), gpu, materialize_grads=True)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for a, b in zip(out_g + d_g, out_c + d_c):
        torch.testing.assert_close(a.cpu(), b, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lltm_sequence_half_types_against_float64(dtype, device):
    # Errors grow along the recurrence: 16 steps, compared at the scale of the results.
    args = make_sequence_args(16, 64, 32, 128)
    want = reference.lltm_sequence(*args)
    got = ops.lltm_sequence(*to_each(args, dtype=dtype, device=device))
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 16, err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lltm_sequence_half_types_backward_against_float64(dtype, device):
    # The backward adds each step's recurrent gradient into grad_h in the half type.
    args = make_sequence_args(16, 64, 32, 128)
    grads = [torch.randn(16, 64, 128, dtype=D), torch.randn(64, 128, dtype=D)]

    def run(fn, args, grads):
        leaves = [a.detach().requires_grad_() for a in args]
        output, h_n, _ = fn(*leaves)
        return torch.autograd.grad((output * grads[0]).sum() + (h_n * grads[1]).sum(), leaves)

    want = run(reference.lltm_sequence, args, grads)
    got = run(
        ops.lltm_sequence,
        to_each(args, dtype=dtype, device=device),
        to_each(grads, dtype=dtype, device=device),
    )
    for g, w in zip(got, want):
        assert g.dtype == dtype
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * 16, err


@pytest.mark.cuda
def test_lltm_sequence_launches_one_kernel_per_step_beside_its_product():
    """Per step, the forward launches the recurrent product (however many kernels cuBLAS
    takes for it: a split-K product takes two) and one pointwise kernel, nothing else."""
    from tensortools.bench import kernel_count

    B, F, S = 16, 32, 128
    args = make_sequence_args(1, B, F, S, dtype=torch.float32, device="cuda")
    W_h_t = args[1][:, :S].t().contiguous()
    gates = torch.randn(16, B, 3 * S, device="cuda")
    hs = torch.randn(16, B, S, device="cuda")

    def products(steps):
        for t in range(steps):
            gates[t].addmm_(hs[t], W_h_t)

    op, alone = {}, {}
    for steps in (8, 16):
        seq = [torch.randn(steps, B, F, device="cuda"), *args[1:]]
        op[steps] = kernel_count(lambda: ops.lltm_sequence(*seq), "cuda")
        alone[steps] = kernel_count(lambda: products(steps), "cuda")
    per_step = (op[16] - op[8]) / 8
    product_per_step = (alone[16] - alone[8]) / 8
    assert product_per_step >= 1, alone
    assert per_step <= product_per_step + 1, (op, alone)


# --- the inference path --------------------------------------------------------------------


INFERENCE_CASES = [(4, 3, 5, 4), (1, 1, 1, 1), (17, 2, 3, 8), (0, 3, 5, 4), (4, 0, 5, 4)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", INFERENCE_CASES, ids=str)
def test_inference_equals_the_training_forward_bit_for_bit(case, layout, dtype, device):
    steps, batch, features, state = case
    shapes = [(steps, batch, features), (3 * state, state + features), (3 * state,)]
    shapes += [(batch, state), (batch, state)]
    args = [make(shape, layout, dtype, device) for shape in shapes]
    trained = T_OPS.lltm_sequence_forward(*args)[:3]
    inferred = T_OPS.lltm_sequence_inference(*args)
    for got, want in zip(inferred, trained):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


def _ops_called(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.events() if e.name.startswith("tensortools::")}


@pytest.mark.parametrize(
    "context, requires_grad",
    [
        (torch.no_grad, True),
        (torch.inference_mode, True),
        (contextlib.nullcontext, False),
    ],
    ids=["no_grad", "inference_mode", "nothing requires grad"],
)
def test_ops_lltm_sequence_keeps_nothing_where_no_gradient_is_wanted(context, requires_grad):
    args = make_sequence_args(6, 3, 5, 4, dtype=torch.float64, requires_grad=requires_grad)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        with context():
            called = _ops_called(lambda: ops.lltm_sequence(*args))
            output, h_n, c_n = ops.lltm_sequence(*args)
    assert "tensortools::lltm_sequence_inference" in called
    assert "tensortools::lltm_sequence_forward" not in called
    assert packed == [] and output.grad_fn is None
    want = reference.lltm_sequence(*(a.detach() for a in args))
    for got, expected in zip((output, h_n, c_n), want):
        torch.testing.assert_close(got, expected)
    # where a gradient is wanted, the training forward runs and keeps its tensors
    if requires_grad:
        called = _ops_called(lambda: ops.lltm_sequence(*args))
        assert "tensortools::lltm_sequence_forward" in called


def test_inference_op_refuses_backward():
    args = make_sequence_args(3, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    output, _, _ = T_OPS.lltm_sequence_inference(*args)
    with pytest.raises(RuntimeError, match="lltm_sequence_inference"):
        output.sum().backward()
