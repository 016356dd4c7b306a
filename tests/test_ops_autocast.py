"""Every operator and module that torch.autocast reaches, against its plain-PyTorch pair
under the same autocast: the output's dtype, its values (within the autocast dtype's
rounding), the gradients' dtypes and values, and the running statistics a training step
leaves. The sweep: units × train/eval × autocast dtypes × devices; the units are the
``autocast`` cases of every operator's record (``TestSamples`` of tests/test_ops_<op>.py,
_support/op_records.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _support.op_records import cases, public_operator
from _support.op_samples import HALF_TOLERANCE
from conftest import DEVICES
from test_ops_conv_bn2d import autocast_modules
from test_ops_graph_conv import autocast_graph

from tensortools import ops, reference

AUTOCAST_DTYPES = [torch.bfloat16, torch.float16]


#: Every operator's cases (the ``autocast`` of its record), and the operators whose
#: autocast tests live in a file of their own (``autocast_elsewhere``: (file, what it calls)).
UNITS = cases("autocast")
ELSEWHERE = cases("autocast_elsewhere")


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
    fused, pair = autocast_modules("cpu", training)
    fused, pair = fused.double(), pair.double()
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    adj, x2, w, b = (t.detach().double() for t in autocast_graph("cpu", 3, 4, "dense"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused(x).dtype == pair(x).dtype == torch.float64
        got = ops.graph_conv(adj, x2, w, b)
        assert got.dtype == torch.float64
    torch.testing.assert_close(got, reference.graph_conv(adj, x2, w, b))


def test_autocast_kernels_compile():
    """torch.compile traces the autocast kernels as eager runs them."""
    fused, _ = autocast_modules("cpu", True)
    adj, x, w, b = (t.detach() for t in autocast_graph("cpu", 3, 4, "dense"))
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


def test_every_operator_is_tested_here_or_where_said():
    # a new operator's record gives its autocast cases, or says where they are
    # (docs/adding-an-operator.md, Tests)
    here = {u.operator or public_operator(name) for name, u in UNITS.items()}
    assert here | set(ELSEWHERE) == set(ops.__all__) and not here & set(ELSEWHERE)
    for name, (file, call) in ELSEWHERE.items():
        assert call in (Path(__file__).parent / file).read_text(), name
