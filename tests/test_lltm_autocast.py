"""The LLTM cell and sequence under torch.autocast, against torch.nn.LSTM (the layer users
would pick instead): which dtypes run, in which they compute and return, and the values
against the float64 maths of the arguments as autocast casts them."""

from __future__ import annotations

import pytest
import torch
from _support.op_samples import HALF_TOLERANCE
from conftest import DEVICES

from tensortools import nn, reference

AUTOCAST_DTYPES = [torch.bfloat16, torch.float16]
T, B, F, S = 6, 5, 7, 16


def _lstm_output_dtypes(device, dtype) -> list[torch.dtype]:
    """The dtypes of nn.LSTM's (output, h_n, c_n) under autocast(device, dtype) for a
    float32 layer and input. Where its kernel cannot run under autocast on this machine
    (oneDNN has no bfloat16/float16 LSTM primitive for a CPU without AVX-512: "could not
    create a primitive descriptor"), those of the same layer on arguments cast to dtype,
    which is what autocast asks of it."""
    lstm = torch.nn.LSTM(F, S).to(device)
    x = torch.randn(T, B, F, device=device)
    try:
        with torch.autocast(device, dtype=dtype):
            output, (h_n, c_n) = lstm(x)
    except RuntimeError as err:
        if device != "cpu" or "primitive descriptor" not in str(err):
            raise
        output, (h_n, c_n) = lstm.to(dtype)(x.to(dtype))
    return [output.dtype, h_n.dtype, c_n.dtype]


def _sequence(device, dtype=torch.float32):
    torch.manual_seed(0)
    module = nn.LLTMSequence(F, S, device=device, dtype=dtype)
    x = torch.randn(T, B, F, device=device, dtype=dtype)
    state = tuple(torch.randn(B, S, device=device, dtype=dtype) for _ in range(2))
    return module, x, state


def _flat(result):
    output, (h_n, c_n) = result
    return [output, h_n, c_n]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_sequence_returns_what_nn_lstm_returns(device, dtype, grad):
    module, x, state = _sequence(device)
    with torch.autocast(device, dtype=dtype), torch.set_grad_enabled(grad):
        got = _flat(module(x, state))
    lstm = _lstm_output_dtypes(device, dtype)
    if device == "cuda" and dtype == torch.bfloat16:
        # torch's autocast wrapper of cuDNN's RNN casts to float16 whatever the autocast
        # dtype; the LLTM keeps the dtype asked for (bfloat16's range is why one asks).
        assert lstm == [torch.float16] * 3
    else:
        assert lstm == [dtype] * 3
    assert [t.dtype for t in got] == [dtype] * 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_autocast_is_the_layer_on_its_arguments_cast(device, dtype):
    """Bit for bit: autocast casts every argument (the parameters too) and runs the
    kernels in the autocast dtype; gradients come back in float32, the same values."""
    module, x, state = _sequence(device)
    x.requires_grad_()
    with torch.autocast(device, dtype=dtype):
        got = _flat(module(x, state))
    grads = [torch.randn_like(t) for t in got]
    leaves = [x, module.weights, module.bias]
    got_grads = torch.autograd.grad(got, leaves, grads)

    cast = nn.LLTMSequence(F, S, device=device, dtype=dtype)
    cast.load_state_dict(module.state_dict())
    x_cast = x.detach().to(dtype).requires_grad_()
    want = _flat(cast(x_cast, tuple(s.to(dtype) for s in state)))
    want_grads = torch.autograd.grad(want, [x_cast, cast.weights, cast.bias], grads)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    for leaf, g, w in zip(leaves, got_grads, want_grads):
        assert g.dtype == leaf.dtype == torch.float32
        assert torch.equal(g, w.float())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
def test_values_match_float64_maths_of_the_cast_arguments(device, dtype, grad):
    module, x, state = _sequence(device)
    with torch.autocast(device, dtype=dtype), torch.set_grad_enabled(grad):
        got = _flat(module(x, state))
    args = [x, module.weights, module.bias, *state]
    want = reference.lltm_sequence(*(a.detach().to(dtype).double() for a in args))
    for g, w in zip(got, want):
        # Errors grow along the recurrence; the products round to dtype before the
        # pointwise maths, which runs in float32 on both devices.
        err = (g.double() - w).abs().max().item()
        assert err <= HALF_TOLERANCE[dtype] * max(1.0, w.abs().max().item()) * T, err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_cell_returns_the_autocast_dtype(device, dtype):
    # As nn.LSTM's layers (and CUDA's cells) do. torch's nn.LSTMCell on the CPU returns
    # float32 there: its gate products are cast, its cell update is not.
    torch.manual_seed(0)
    cell = nn.LLTM(F, S, device=device)
    x = torch.randn(B, F, device=device)
    state = tuple(torch.randn(B, S, device=device) for _ in range(2))
    with torch.autocast(device, dtype=dtype):
        h, c = cell(x, state)
    assert h.dtype == c.dtype == dtype
    args = (x, cell.weights, cell.bias, *state)
    want = reference.lltm(*(a.detach().to(dtype).double() for a in args))
    for g, w in zip((h, c), want):
        assert (g.double() - w).abs().max().item() <= HALF_TOLERANCE[dtype] * 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_float64_is_left_alone(device, dtype):
    module, x, state = _sequence(device, torch.float64)
    with torch.autocast(device, dtype=dtype):
        got = _flat(module(x, state))
    want = _flat(module(x, state))
    for g, w in zip(got, want):
        assert g.dtype == torch.float64 and torch.equal(g, w)


@pytest.mark.parametrize("device", DEVICES)
def test_a_float64_state_beside_a_float32_input_is_named(device):
    # autocast casts the float32 arguments and leaves float64: the mismatch is reported
    module, x, _ = _sequence(device)
    state = tuple(torch.zeros(B, S, device=device, dtype=torch.float64) for _ in range(2))
    with torch.autocast(device, dtype=torch.bfloat16):
        with pytest.raises(TypeError, match="'h0' must have the same dtype as 'input'"):
            module(x, state)
