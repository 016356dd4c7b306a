"""Every operator and module that torch.autocast reaches, against its plain-PyTorch pair
under the same autocast: the output's dtype, its values (within the autocast dtype's
rounding), the gradients' dtypes and values, and the running statistics a training step
leaves. The sweep: units × train/eval × autocast dtypes × devices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from _support.op_samples import HALF_TOLERANCE
from conftest import DEVICES

from tensortools import nn, ops, reference

AUTOCAST_DTYPES = [torch.bfloat16, torch.float16]


class Unit(NamedTuple):
    """``fused(*leaves)`` and ``pair(*leaves)``: the same maths, the pair in plain PyTorch.
    ``leaves`` are float32 tensors (those requiring grad are differentiated); modules are
    made by ``make`` and copied, so that each side has its own parameters and buffers."""

    fused: Callable
    pair: Callable
    leaves: Callable  # device -> list of tensors
    make: Callable | None = None  # (device, training) -> (fused module, pair module)


def _conv_bn_modules(device, training, **bn):
    pair = torch.nn.Sequential(
        torch.nn.Conv2d(3, 5, 3, stride=1, padding=1, bias=False),
        torch.nn.BatchNorm2d(5, **bn),
    ).to(device)
    with torch.no_grad():  # running statistics and affine parameters away from the defaults
        if pair[1].affine:
            pair[1].weight.uniform_(0.5, 1.5)
            pair[1].bias.uniform_(-0.5, 0.5)
        if pair[1].track_running_stats:
            pair[1].running_mean.uniform_(-0.2, 0.2)
            pair[1].running_var.uniform_(0.5, 1.5)
    fused = nn.FusedConvBN2d.from_modules(pair[0], pair[1])
    return fused.train(training), pair.train(training)


def _image(device):
    return [torch.randn(4, 3, 6, 6, device=device).requires_grad_()]


def _graph(device, f_in, f_out, layout):
    adj = (torch.rand(7, 7, device=device) < 0.4) * torch.rand(7, 7, device=device)
    adj = adj.to_sparse() if layout == "coo" else adj.to_sparse_csr() if layout == "csr" else adj
    x = torch.randn(7, f_in, device=device).requires_grad_()
    w = torch.randn(f_in, f_out, device=device).requires_grad_()
    b = torch.randn(f_out, device=device).requires_grad_()
    return [adj, x, w, b]


def _dense_adj(adj):
    return adj.to_dense() if adj.layout != torch.strided else adj


UNITS = {
    **{
        f"FusedConvBN2d{name}": Unit(
            lambda m, x: m(x),
            lambda m, x: m(x),
            _image,
            lambda device, training, bn=bn: _conv_bn_modules(device, training, **bn),
        )
        for name, bn in {
            "": {},
            "(affine=False)": {"affine": False},
            "(track_running_stats=False)": {"track_running_stats": False},
        }.items()
    },
    **{
        f"graph_conv({layout}, {f_in}->{f_out}{', bias' if bias else ''})": Unit(
            (lambda a, x, w, b: ops.graph_conv(a, x, w, b))
            if bias
            else (lambda a, x, w, b: ops.graph_conv(a, x, w)),
            (lambda a, x, w, b: reference.graph_conv(_dense_adj(a), x, w, b))
            if bias
            else (lambda a, x, w, b: reference.graph_conv(_dense_adj(a), x, w, None)),
            lambda device, f_in=f_in, f_out=f_out, layout=layout: _graph(
                device, f_in, f_out, layout
            ),
        )
        for layout in ("dense", "coo", "csr")
        for f_in, f_out in ((3, 6), (6, 3))  # both orders of the products
        for bias in (True, False)
    },
    "axpby": Unit(
        lambda x, y: ops.axpby(x, y, 2.0, -0.5),
        lambda x, y: reference.axpby(x, y, 2.0, -0.5),
        lambda device: [
            torch.randn(4, 5, device=device).requires_grad_(),
            torch.randn(5, device=device).requires_grad_(),
        ],
    ),
    "scale": Unit(
        ops.scale,
        lambda t, v: v * t,
        lambda device: [
            torch.randn(2, 4, 4, device=device).requires_grad_(),
            torch.tensor(1.5, device=device).requires_grad_(),
        ],
    ),
    "add_diagonal": Unit(
        ops.add_diagonal,
        lambda t, v: t + v * torch.eye(4, device=t.device),
        lambda device: [
            torch.randn(2, 4, 4, device=device).requires_grad_(),
            torch.tensor(1.5, device=device).requires_grad_(),
        ],
    ),
}


def _run(fn, module, leaves, device, dtype):
    """fn's output under autocast and, after backward of a fixed projection of it outside
    autocast (as training loops do), the gradients of leaves and module parameters."""
    with torch.autocast(torch.device(device).type, dtype=dtype):
        out = fn(module, *leaves) if module is not None else fn(*leaves)
    projection = torch.linspace(-1, 1, out.numel(), device=out.device).reshape(out.shape)
    (out.float() * projection).sum().backward()
    params = list(module.parameters()) if module is not None else []
    return out, [t.grad for t in leaves if t.requires_grad] + [p.grad for p in params]


def _close(got, want, dtype, what):
    """got against want, both computed in (at most) `dtype`'s precision: within twice
    HALF_TOLERANCE (a few of its roundings), relative to the larger of 1 and the values'
    scale."""
    want, got = want.detach().double(), got.detach().double()
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    tol = 2 * HALF_TOLERANCE[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale, msg=what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_matches_the_plain_pair_under_autocast(unit, training, dtype, device):
    u = UNITS[unit]
    if u.make is None and not training:
        pytest.skip("an operator without modules has no eval mode")
    leaves = u.leaves(device)
    modules = u.make(device, training) if u.make else (None, None)
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in leaves]
    got, got_grads = _run(u.fused, modules[0], leaves, device, dtype)
    want, want_grads = _run(u.pair, modules[1], copies, device, dtype)

    assert got.dtype == want.dtype, (unit, got.dtype, want.dtype)
    assert got.shape == want.shape
    _close(got, want, dtype, f"{unit}: output")
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        assert (g is None) == (w is None), (unit, i)
        if g is not None:
            assert g.dtype == w.dtype, (unit, i, g.dtype, w.dtype)
            _close(g, w, dtype, f"{unit}: gradient {i}")
    if modules[0] is not None:  # running statistics and their dtypes
        fused_buffers = dict(modules[0].named_buffers())
        for name, w in modules[1][1].named_buffers():
            g = fused_buffers[name]
            assert g.dtype == w.dtype, (unit, name)
            _close(g, w, dtype, f"{unit}: {name}")


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_float64_stays_float64_under_autocast(training):
    """Autocast leaves float64 alone (its casts skip it): so do the operators."""
    fused, pair = _conv_bn_modules("cpu", training)
    fused, pair = fused.double(), pair.double()
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    adj, x2, w, b = (t.detach().double() for t in _graph("cpu", 3, 4, "dense"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused(x).dtype == pair(x).dtype == torch.float64
        got = ops.graph_conv(adj, x2, w, b)
        assert got.dtype == torch.float64
    torch.testing.assert_close(got, reference.graph_conv(adj, x2, w, b))


def test_autocast_kernels_compile():
    """torch.compile traces the autocast kernels as eager runs them."""
    fused, _ = _conv_bn_modules("cpu", True)
    adj, x, w, b = (t.detach() for t in _graph("cpu", 3, 4, "dense"))
    image = torch.randn(2, 3, 5, 5)

    def f(image, adj, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fused(image), ops.graph_conv(adj, x, w, b)

    eager = f(image, adj, x)
    fused.running_mean.zero_(), fused.running_var.fill_(1)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(image, adj, x)
    for e, c in zip(eager, compiled):
        assert e.dtype == c.dtype
        torch.testing.assert_close(c, e, rtol=2e-2, atol=2e-2)


#: Operators whose autocast tests live in a file of their own: (file, what it calls).
ELSEWHERE = {
    "lltm": ("test_lltm_autocast.py", "nn.LLTM("),
    "lltm_sequence": ("test_lltm_autocast.py", "nn.LLTMSequence("),
}


def test_every_operator_is_tested_here_or_where_said():
    # a new operator joins UNITS or ELSEWHERE (docs/adding-an-operator.md, Tests)
    here = {"fused_conv_bn2d" if u.startswith("FusedConvBN2d") else u.split("(")[0] for u in UNITS}
    assert here | set(ELSEWHERE) == set(ops.__all__) and not here & set(ELSEWHERE)
    for name, (file, call) in ELSEWHERE.items():
        assert call in (Path(__file__).parent / file).read_text(), name
