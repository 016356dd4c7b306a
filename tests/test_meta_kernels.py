"""Meta kernels against the real ones, for every operator of torch.ops.tensortools.

The meta kernel of an operator (what meta tensors and torch.compile see) calls the same
C++ check and output-allocation functions as its CPU and CUDA kernels. These tests hold
that up from outside: torch.library.opcheck (schema, autograd registration, fake tensors
against the real kernel including strides, AOT dispatch with dynamic shapes) over
contiguous, transposed, channels_last, expanded and empty inputs; mixed meta and CPU
arguments refused; and torch.compile of the modules on those layouts and on changing
shapes, equal to eager.
"""

from __future__ import annotations

import pytest
import torch

from tensortools import nn, ops

pytestmark = pytest.mark.slow  # opcheck over every layout

T = torch.ops.tensortools
D = torch.float64
LAYOUTS = ["contiguous", "transposed", "channels_last", "expanded", "empty"]


def laid_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t (or, for "expanded", a tensor of t's shape and first row) in the given layout;
    layouts that do not apply to t's rank leave it contiguous."""
    t = t.detach()
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "expanded" and t.dim() >= 1 and t.shape[0] > 1:
        return t[:1].expand(t.shape)
    return t.contiguous()


def _grad(*tensors):
    return [t.requires_grad_() if t.is_floating_point() else t for t in tensors]


def lltm_forward(layout):
    B, F, S = (0 if layout == "empty" else 3), 5, 4
    shapes = [(B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]
    return [tuple(_grad(*(laid_out(torch.randn(s, dtype=D), layout) for s in shapes)))]


def lltm_backward(layout):
    (args,) = lltm_forward("empty" if layout == "empty" else "contiguous")
    _, new_cell, gates, X = T.lltm_forward(*args)
    B, S = new_cell.shape
    grads = [laid_out(torch.randn(B, S, dtype=D), layout) for _ in range(2)]
    return [
        (
            *grads,
            new_cell.detach(),
            laid_out(gates, layout),
            laid_out(X, layout),
            laid_out(args[1], layout),
        )
    ]


def lltm_sequence_forward(layout):
    T, B, F, S = 4, (0 if layout == "empty" else 3), 5, 4
    shapes = [(T, B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]
    cases = [tuple(_grad(*(laid_out(torch.randn(s, dtype=D), layout) for s in shapes)))]
    if layout == "empty":  # no steps at all
        cases.append(
            tuple(_grad(*(torch.randn(0, 3, F, dtype=D), *cases[0][1:3])))
            + tuple(_grad(torch.randn(3, S, dtype=D), torch.randn(3, S, dtype=D)))
        )
    return cases


def lltm_sequence_backward(layout):
    cases = []
    for args in lltm_sequence_forward("empty" if layout == "empty" else "contiguous"):
        input, weights, _, h0, _ = (a.detach() for a in args)
        output, h_n, c_n, cells, gates = T.lltm_sequence_forward(*args)
        grads = [laid_out(torch.randn(t.shape, dtype=D), layout) for t in (output, h_n, c_n)]
        saved = tuple(laid_out(t, layout) for t in (input, weights, h0, output.detach()))
        for mask in ([True, True, True], [False, True, False], [True, False, True]):
            cases.append((*grads, *saved, cells, laid_out(gates, layout), mask))
    return cases


def _square(layout):
    n = 0 if layout == "empty" else 4
    t = laid_out(torch.randn(2, 3, n, n, dtype=D), layout)
    return [
        (t.requires_grad_(), torch.tensor(1.5, dtype=D, requires_grad=True)),
        (t.detach()[0, 0], torch.tensor(-2.0, dtype=D)),
    ]


def axpby(layout):
    n = 0 if layout == "empty" else 2
    x = laid_out(torch.randn(n, 3, 4, 5, dtype=D), layout)
    y = laid_out(torch.randn(n, 3, 4, 5, dtype=D), layout)
    return [(*_grad(x, y), 2.0, -0.5), (*_grad(x.detach(), torch.randn(5, dtype=D)), 1.0, 3.0)]


def graph_conv(layout):
    n = 0 if layout == "empty" else 5
    adj = laid_out(torch.randn(n, n, dtype=D), layout)
    x = laid_out(torch.randn(n, 3, dtype=D), layout)
    w, b = torch.randn(3, 2, dtype=D), torch.randn(2, dtype=D)
    return [tuple(_grad(adj, x, w, b)), (*_grad(adj.detach(), x.detach(), w.detach()), None)]


def _conv(layout):
    n = 0 if layout == "empty" else 2
    inp = laid_out(torch.randn(n, 3, 6, 6, dtype=D), layout)
    weight = laid_out(torch.randn(4, 3, 3, 3, dtype=D), layout)
    return inp, weight, torch.rand(4, dtype=D) + 0.5, torch.randn(4, dtype=D)


def conv_bn2d_forward(layout):
    if layout == "empty":  # no batch, no statistics: refused (tested below)
        layout = "contiguous"
    inp, weight, gamma, beta = _conv(layout)
    return [
        (*_grad(inp, weight, gamma, beta), [1, 1], [1, 1], 1e-5),
        (*_grad(inp.detach(), weight.detach()), None, None, [2, 1], [0, 2], 0.0),
    ]


def conv_bn2d_backward(layout):
    inp, weight, gamma, beta = _conv("contiguous")
    out, mean, var = T.conv_bn2d_forward(inp, weight, gamma, beta, [1, 1], [1, 1], 1e-5)
    grad = laid_out(torch.randn_like(out), layout)
    return [
        (
            grad,
            laid_out(inp, layout),
            laid_out(weight, layout),
            gamma,
            mean,
            var,
            [1, 1],
            [1, 1],
            1e-5,
            mask,
        )
        for mask in ([True, True, True], [True, False, True], [False, True, False])
    ]


def conv_bn2d_eval(layout):
    inp, weight, gamma, beta = _conv(layout)
    stats = torch.randn(4, dtype=D), torch.rand(4, dtype=D) + 0.5
    return [
        (*_grad(inp, weight), *stats, *_grad(gamma, beta), [1, 1], [1, 1], 1e-5),
        (*_grad(inp.detach(), weight.detach()), *stats, None, None, [2, 2], [0, 0], 0.0),
    ]


def conv_bn2d_update_stats(layout):
    n = 0 if layout == "empty" else 2
    cases = []
    for dtype in (D, torch.half):  # half: its statistics are in float
        output = laid_out(torch.randn(n, 4, 3, 3, dtype=dtype), layout)
        stats = torch.float32 if dtype == torch.half else dtype
        mean = laid_out(torch.randn(4, dtype=stats), layout)
        var = laid_out(torch.rand(4, dtype=stats), layout)
        running = torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)
        cases.append((*running, output, mean, var, 0.1))
    return cases


CASES = {
    "lltm_forward": lltm_forward,
    "lltm_backward": lltm_backward,
    "lltm_sequence_forward": lltm_sequence_forward,
    "lltm_sequence_backward": lltm_sequence_backward,
    "add_diagonal": _square,
    "scale": _square,
    "scale_finite": _square,
    "axpby": axpby,
    "graph_conv": graph_conv,
    "conv_bn2d_forward": conv_bn2d_forward,
    "conv_bn2d_backward": conv_bn2d_backward,
    "conv_bn2d_eval": conv_bn2d_eval,
    "conv_bn2d_update_stats": conv_bn2d_update_stats,
}


def test_every_operator_has_cases():
    registered = {
        n.split("::")[1]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("tensortools::")
    }
    assert registered == set(CASES)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_opcheck(name, layout):
    op = getattr(T, name).default
    for args in CASES[name](layout):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_kernel_describes_the_real_result(name, layout):
    """Shapes, dtypes and the strides of every non-trivial dimension agree; the meta
    kernel never computes (its outputs are meta tensors)."""
    op = getattr(T, name).default
    for args in CASES[name](layout):
        real = op(*args)
        meta = op(*[a.detach().to("meta") if isinstance(a, torch.Tensor) else a for a in args])
        real = real if isinstance(real, tuple) else (real,)
        meta = meta if isinstance(meta, tuple) else (meta,)
        assert len(real) == len(meta)
        for r, m in zip(real, meta):
            if r is None:
                assert m is None
                continue
            assert m.is_meta
            assert (m.shape, m.dtype) == (r.shape, r.dtype)
            assert [s for n, s in zip(m.shape, m.stride()) if n > 1] == [
                s for n, s in zip(r.shape, r.stride()) if n > 1
            ]


def _with_one_on_meta(args, index):
    return [a.detach().to("meta") if i == index else a for i, a in enumerate(args)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_argument_on_meta_is_refused(name):
    """A meta tensor among CPU ones dispatches to the meta kernel, which must refuse the
    mix (never hand back uninitialised memory as a result)."""
    op = getattr(T, name).default
    (args, *_) = CASES[name]("contiguous")
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    if sum(isinstance(a, torch.Tensor) for a in args) < 2:
        pytest.skip(f"{name} takes one tensor: there is no mix of devices to refuse")
    for index, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        if name in ("add_diagonal", "scale", "scale_finite") and index == 1:
            continue  # the value is read as a number (its device is not a tensor's device)
        with pytest.raises(ValueError, match="must be on the same device"):
            op(*_with_one_on_meta(args, index))


def test_conv_bn_refuses_what_it_cannot_normalise():
    inp, weight = torch.randn(2, 0, 5, 5), torch.randn(3, 0, 3, 3)
    for device in ("cpu", "meta"):
        with pytest.raises(ValueError, match="'input' must have at least one channel"):
            ops.fused_conv_bn2d(inp.to(device), weight.to(device))
        with pytest.raises(ValueError, match="'input' must have at least one channel"):
            ops.fused_conv_bn2d(
                inp.to(device),
                weight.to(device),
                torch.zeros(3, device=device),
                torch.ones(3, device=device),
                training=False,
            )
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            ops.fused_conv_bn2d(
                torch.randn(1, 2, 3, 3, device=device), torch.randn(4, 2, 3, 3, device=device)
            )
        with pytest.raises(ValueError, match="'eps' must be >= 0"):
            ops.fused_conv_bn2d(
                torch.randn(2, 2, 3, 3, device=device),
                torch.randn(4, 2, 3, 3, device=device),
                torch.zeros(4),
                torch.ones(4),
                training=False,
                eps=-1e-3,
            )


@pytest.mark.parametrize("weight_shape", [(0, 2, 3, 3), (4, 2, 0, 3), (4, 2, 3, 0)])
def test_conv_bn_refuses_an_empty_weight_on_every_device(weight_shape):
    for device in ("cpu", "meta"):
        inp, weight = (
            torch.randn(2, 2, 5, 5, device=device),
            torch.randn(weight_shape, device=device),
        )
        with pytest.raises(ValueError, match="'weight' must have at least one output channel"):
            T.conv_bn2d_forward(inp, weight, None, None, [1, 1], [0, 0], 1e-5)


def test_axpby_refuses_complex_scales_on_every_device():
    for device in ("cpu", "meta"):
        x = torch.randn(3, device=device)
        for alpha, beta, name in ((1j, 1.0, "alpha"), (1.0, 2 + 0j, "beta")):
            with pytest.raises(TypeError, match=f"'{name}' must be a real number"):
                T.axpby(x, x, alpha, beta)


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
    x = torch.randn(2, 3, 6, 6, dtype=D).contiguous(memory_format=memory_format)
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
        x = torch.randn(batch, 5, dtype=D)
        h, c = torch.zeros(batch, 16, dtype=D), torch.zeros(batch, 16, dtype=D)
        conv_state = {k: v.clone() for k, v in conv.state_dict().items()}
        want = step(x, h, c, cell, conv)
        conv.load_state_dict(conv_state)
        torch.testing.assert_close(compiled(x, h, c, cell, conv), want)


def _tensortools_ops():
    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("tensortools::"))


def test_every_op_has_cpu_cuda_and_meta_kernels():
    # (a build without CUDA gives the operators with a CPU kernel of their own a CUDA one
    # that raises a clear error, found from the dispatcher: csrc/ops/cuda_missing.cpp)
    names = _tensortools_ops()
    assert "tensortools::lltm_forward" in names
    for name in names:
        for key in ("CPU", "CUDA", "Meta"):  # a composite registration counts for each
            assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key), (name, key)
