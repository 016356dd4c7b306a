"""tensortools.nn.LLTM: initialisation, forward against the reference, torch.compile."""

import math

import pytest
import torch
from _support.lltm_cases import random_grads

from tensortools import nn, reference


def _inputs(batch, features, state, dtype=torch.float32):
    return (
        torch.randn(batch, features, dtype=dtype),
        (torch.randn(batch, state, dtype=dtype), torch.randn(batch, state, dtype=dtype)),
    )


def test_parameters_shapes_and_init_bounds():
    torch.manual_seed(1)
    cell = nn.LLTM(32, 128)
    assert cell.weights.shape == (384, 160) and cell.bias.shape == (384,)
    bound = 1 / math.sqrt(128)
    for p in (cell.weights, cell.bias):
        assert p.abs().max() <= bound
        # uniform: the extremes come close to the bound, and the mean is near zero
        assert p.abs().max() > 0.95 * bound
        assert abs(p.mean().item()) < 0.1 * bound
    assert "input_features=32, state_size=128" in repr(cell)


def test_dtype_and_device_arguments():
    cell = nn.LLTM(3, 4, dtype=torch.float64, device="cpu")
    assert cell.weights.dtype == torch.float64 and cell.bias.device.type == "cpu"


def test_forward_and_gradients_match_reference():
    cell = nn.LLTM(5, 7).double()
    x, (h, c) = _inputs(3, 5, 7, torch.float64)
    new_h, new_cell = cell(x, (h, c))
    ref_h, ref_cell = reference.lltm(x, cell.weights, cell.bias, h, c)
    torch.testing.assert_close(new_h, ref_h)
    torch.testing.assert_close(new_cell, ref_cell)
    gh, gc = random_grads(3, 7)
    got = torch.autograd.grad((new_h, new_cell), (cell.weights, cell.bias), (gh, gc))
    want = torch.autograd.grad((ref_h, ref_cell), (cell.weights, cell.bias), (gh, gc))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_unrolled_sequence_matches_reference():
    cell = nn.LLTM(4, 6).double()
    xs = torch.randn(5, 2, 4, dtype=torch.float64)
    state = ref_state = (torch.zeros(2, 6, dtype=torch.float64),) * 2
    for x in xs:
        state = cell(x, state)
        ref_state = reference.lltm(x, cell.weights, cell.bias, *ref_state)
    torch.testing.assert_close(state, ref_state)
    state[0].sum().backward()
    got = cell.weights.grad.clone()
    cell.weights.grad = None
    ref_state[0].sum().backward()
    torch.testing.assert_close(got, cell.weights.grad)


@pytest.mark.parametrize(
    "args,error",
    [
        ((0, 4), ValueError),
        ((4, -1), ValueError),
        ((4.0, 4), TypeError),
        ((4, True), TypeError),
    ],
)
def test_bad_constructor_arguments(args, error):
    with pytest.raises(error, match="input_features|state_size"):
        nn.LLTM(*args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_matches_eager(backend):
    cell = nn.LLTM(32, 128)
    x, (h, c) = _inputs(16, 32, 128)
    compiled = torch.compile(cell, fullgraph=True, backend=backend)
    gh, gc = random_grads(16, 128, dtype=torch.float32)
    out_c = compiled(x, (h, c))
    grads_c = torch.autograd.grad(out_c, list(cell.parameters()), (gh, gc))
    out_e = cell(x, (h, c))
    grads_e = torch.autograd.grad(out_e, list(cell.parameters()), (gh, gc))
    for a, b in zip(out_c + grads_c, out_e + grads_e):
        torch.testing.assert_close(a, b)


# --- compiled modules ------------------------------------------------------------------


def _training_steps(module, x, steps=2):
    outs = []
    for _ in range(steps):
        out = module(x)
        out.square().mean().backward()
        outs.append(out.detach())
    return outs, [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_compiled_training_step_matches_eager(memory_format):
    torch.manual_seed(0)
    eager = nn.FusedConvBN2d(3, 4, 3, padding=1).double()
    compiled_module = nn.FusedConvBN2d(3, 4, 3, padding=1).double()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_module, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64).contiguous(memory_format=memory_format)
    want, want_grads = _training_steps(eager, x)
    got, got_grads = _training_steps(compiled, x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grads, want_grads)
    torch.testing.assert_close(compiled_module.running_var, eager.running_var)
    assert int(compiled_module.num_batches_tracked) == 2


def test_compiled_ops_follow_changing_shapes():
    """Shapes that change between calls make torch.compile trace with symbolic sizes,
    which the meta kernels read as such; every result equals eager."""

    def step(x, h, c, cell, conv):
        h, c = cell(x, (h, c))
        return h, c, conv(h.reshape(h.shape[0], 1, 4, 4))

    torch.manual_seed(0)
    cell, conv = nn.LLTM(5, 16).double(), nn.FusedConvBN2d(1, 2, 3, padding=1).double()
    compiled = torch.compile(step, backend="aot_eager", dynamic=True, fullgraph=True)
    for batch in (2, 3, 7):
        x = torch.randn(batch, 5, dtype=torch.float64)
        h, c = (
            torch.zeros(batch, 16, dtype=torch.float64),
            torch.zeros(batch, 16, dtype=torch.float64),
        )
        conv_state = {k: v.clone() for k, v in conv.state_dict().items()}
        want = step(x, h, c, cell, conv)
        conv.load_state_dict(conv_state)
        torch.testing.assert_close(compiled(x, h, c, cell, conv), want)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_modules_on_cuda(backend):
    torch._dynamo.reset()
    cell = nn.LLTM(32, 64, device="cuda")
    x, h, c = (
        torch.randn(8, 32, device="cuda"),
        torch.randn(8, 64, device="cuda"),
        torch.randn(8, 64, device="cuda"),
    )
    compiled = torch.compile(cell, fullgraph=True, backend=backend)
    for a, b in zip(compiled(x, (h, c)), cell(x, (h, c))):
        torch.testing.assert_close(a, b)
    layer = nn.FusedConvBN2d(3, 4, 3, padding=1, device="cuda")
    twin = nn.FusedConvBN2d(3, 4, 3, padding=1, device="cuda")
    twin.load_state_dict(layer.state_dict())
    img = torch.randn(2, 3, 8, 8, device="cuda")
    torch.testing.assert_close(
        torch.compile(twin, fullgraph=True, backend=backend)(img), layer(img)
    )
