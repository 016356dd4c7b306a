"""The operators' two autograd paths (tensortools/ops/_autograd.py): outside transforms,
forward AD, autocast and torch.compile the entry points take the lean path (one plain
``autograd.Function`` applied in the entry point, never the operators' Python Autograd
kernel); inside, the registered route. Both give the values and gradients of the
float64 reference, swept over dtypes, layouts and each subset of inputs requiring grad."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import func
from torch.autograd import forward_ad

from tensortools import ops, reference
from tensortools.ops import _autograd


def _eye_plus(x, v):
    return x + v * torch.eye(x.shape[-1], dtype=x.dtype)


def _conv_bn(op):
    def run(x, w, g, b):
        # running statistics of the call's dtype: the update runs too
        stats = (torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype))
        return op(x, w, *stats, g, b, padding=1)

    return run


# name: (entry point, reference, argument shapes, whether second order is provided)
CASES = {
    "lltm": (ops.lltm, reference.lltm, [(3, 4), (6, 6), (6,), (3, 2), (3, 2)], False),
    "lltm_sequence": (
        ops.lltm_sequence,
        reference.lltm_sequence,
        [(2, 3, 4), (6, 6), (6,), (3, 2), (3, 2)],
        False,
    ),
    "fused_conv_bn2d": (
        _conv_bn(ops.fused_conv_bn2d),
        _conv_bn(reference.fused_conv_bn2d),
        [(2, 2, 4, 4), (3, 2, 3, 3), (3,), (3,)],
        False,
    ),
    "axpby": (
        lambda x, y: ops.axpby(x, y, 2.0, -3.0),
        lambda x, y: reference.axpby(x, y, 2.0, -3.0),
        [(3, 4), (3, 4)],
        True,
    ),
    "graph_conv": (ops.graph_conv, reference.graph_conv, [(4, 4), (4, 3), (3, 2), (2,)], True),
    "scale": (ops.scale, lambda x, v: v * x, [(3, 4), ()], True),
    "add_diagonal": (ops.add_diagonal, _eye_plus, [(2, 3, 3), ()], True),
}
LAYOUTS = ("contiguous", "transposed", "expanded")


def _leaf_and_view(shape, layout, dtype):
    """A leaf tensor and the view of it passed as the argument (of shape ``shape``):
    itself, a transposed (or strided) view, or an expanded one."""
    if layout == "transposed" and len(shape) >= 2:
        leaf = torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=dtype)
        return leaf, lambda t: t.transpose(-1, -2)
    if layout == "transposed" and len(shape) == 1:
        leaf = torch.randn(2 * shape[0], dtype=dtype)
        return leaf, lambda t: t[::2]
    if layout == "expanded" and len(shape) >= 1:
        leaf = torch.randn(1, *shape[1:], dtype=dtype)
        return leaf, lambda t: t.expand(shape)
    return torch.randn(shape, dtype=dtype), lambda t: t


def _make(name, layout, dtype):
    leaves, views = zip(*(_leaf_and_view(s, layout, dtype) for s in CASES[name][2]))
    if name == "graph_conv" and layout == "expanded":
        views = (lambda t: t.expand(4, 4),) + views[1:]
    return list(leaves), views


class _Spy:
    """Counts entries into the operators' Python Autograd kernel (its first step asks
    wants_autograd) and records each entry point's routing verdict."""

    def __init__(self, monkeypatch):
        self.kernel_calls, self.verdicts = 0, []
        wants, routed = _autograd.wants_autograd, getattr(_autograd, "routed", None)

        def counting_wants(args):
            self.kernel_calls += 1
            return wants(args)

        monkeypatch.setattr(_autograd, "wants_autograd", counting_wants)
        if routed is not None:

            def recording_routed():
                verdict = routed()
                self.verdicts.append(verdict)
                return verdict

            monkeypatch.setattr(_autograd, "routed", recording_routed)


def _outputs(result):
    return [
        r for r in (result if isinstance(result, tuple) else (result,)) if r.is_floating_point()
    ]


@pytest.mark.parametrize("name", CASES)
def test_lean_path_outside_transforms(name, monkeypatch):
    """Forward and backward of every entry point, with and without gradients wanted,
    never enter the Python Autograd kernel outside a transform (before the lean path,
    every call did)."""
    op = CASES[name][0]
    leaves, views = _make(name, "contiguous", torch.float64)
    spy, nodes = _Spy(monkeypatch), []
    for wanted in (False, True):
        args = [v(t.detach().requires_grad_(wanted)) for t, v in zip(leaves, views)]
        outs = _outputs(op(*args))
        if wanted:
            torch.autograd.grad(outs, args, [torch.ones_like(o) for o in outs])
            nodes += [type(o.grad_fn).__name__ for o in outs]
    with torch.no_grad():
        op(*[v(t.requires_grad_()) for t, v in zip(leaves, views)])
    assert spy.kernel_calls == 0
    assert spy.verdicts and not any(spy.verdicts)
    # (the lean path's Function: in Python, or the LLTM cell's in C++)
    assert any("LeanFunction" in node or node == "CppFunction" for node in nodes), nodes


def _under(transform, name):
    op = CASES[name][0]
    leaves, views = _make(name, "contiguous", torch.float64)
    args = [v(t) for t, v in zip(leaves, views)]

    def first(*a):
        return _outputs(op(*a))[0].sum()

    if transform == "grad":
        func.grad(first)(*args)
    elif transform == "vmap":
        func.vmap(lambda x: _outputs(op(*args[:-1], x))[0], in_dims=0)(
            args[-1].unsqueeze(0).expand(2, *args[-1].shape).clone()
        )
    elif transform == "jvp":
        func.jvp(first, tuple(args), tuple(torch.ones_like(a) for a in args))
    elif transform == "functionalize":
        func.functionalize(first)(*args)
    elif transform == "forward AD":
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(args[0], torch.ones_like(args[0]))
            first(dual, *args[1:])
    elif transform == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            first(*(a.float().requires_grad_() for a in args))


TRANSFORMS = ("grad", "vmap", "jvp", "functionalize", "forward AD", "autocast")


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", ["lltm", "lltm_sequence", "axpby", "graph_conv", "scale"])
def test_routed_under_transforms(name, transform, monkeypatch):
    """Under every torch.func transform, forward AD and autocast the entry points take the
    registered route (the transforms reach the operator's kernel at each level)."""
    spy = _Spy(monkeypatch)
    _under(transform, name)
    assert spy.verdicts and all(spy.verdicts)
    if transform != "vmap":
        assert spy.kernel_calls > 0


def _ref_grads(name, leaves, views, cotangents):
    """Values and gradients (for every leaf) of the reference, in float64."""
    ref = CASES[name][1]
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    outs = _outputs(ref(*[v(t) for t, v in zip(leaves64, views)]))
    grads = torch.autograd.grad(outs, leaves64, [c.double() for c in cotangents])
    return [o.detach() for o in outs], grads


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["lean", "routed"])
@pytest.mark.parametrize("name", CASES)
def test_paths_match_reference(name, path, dtype, layout, monkeypatch):
    """Both paths, each subset of the inputs requiring grad (none included): the values
    and the gradients of the leaves that require grad equal the float64 reference's."""
    if path == "routed":
        monkeypatch.setattr(_autograd, "routed", lambda: True)
    spy = _Spy(monkeypatch)
    op = CASES[name][0]
    leaves, views = _make(name, layout, dtype)
    with torch.no_grad():
        cotangents = [
            torch.randn_like(o) for o in _outputs(op(*[v(t) for t, v in zip(leaves, views)]))
        ]
    ref_outs, ref_grads = _ref_grads(name, leaves, views, cotangents)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    n = len(leaves)
    for subset in itertools.chain.from_iterable(
        itertools.combinations(range(n), k) for k in range(n + 1)
    ):
        mine = [t.detach().requires_grad_(i in subset) for i, t in enumerate(leaves)]
        outs = _outputs(op(*[v(t) for t, v in zip(mine, views)]))
        for out, expected in zip(outs, ref_outs):
            assert out.dtype == dtype
            torch.testing.assert_close(out.double(), expected, **tol)
        if not subset:
            assert not any(o.requires_grad for o in outs)
            continue
        wrt = [mine[i] for i in subset]
        used = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
        used_outs, used_cots = zip(*used)
        grads = torch.autograd.grad(used_outs, wrt, used_cots, allow_unused=True)
        for i, g in zip(subset, grads):
            expected = ref_grads[i]
            got = torch.zeros_like(expected) if g is None else g.double()
            torch.testing.assert_close(got, expected, **tol, msg=f"{name} grad of arg {i}")
    assert (spy.kernel_calls > 0) == (path == "routed")


@pytest.mark.parametrize("path", ["lean", "routed"])
@pytest.mark.parametrize("name", CASES)
def test_double_backward(name, path, monkeypatch):
    """``create_graph=True``: where a second derivative is provided (the backward formula
    is ATen operators or the entry point itself), both paths give the float64 reference's
    gradient of the gradient; where not (the LLTM and conv-bn backward kernels), both
    refuse, naming the operator, as before the lean path."""
    if path == "routed":
        monkeypatch.setattr(_autograd, "routed", lambda: True)
    op, ref, _, second_order = CASES[name]
    leaves, views = _make(name, "contiguous", torch.float64)

    def grad_of_grad(fn):
        ts = [t.detach().requires_grad_() for t in leaves]
        outs = _outputs(fn(*[v(t) for t, v in zip(ts, views)]))
        loss = sum((o * o).sum() for o in outs)
        grads = torch.autograd.grad(loss, ts, create_graph=True)
        return torch.autograd.grad(sum((g * g).sum() for g in grads), ts, allow_unused=True)

    if not second_order:
        with pytest.raises(RuntimeError, match="does not support double backward"):
            grad_of_grad(op)
        return
    for got, expected in zip(grad_of_grad(op), grad_of_grad(ref)):
        if expected is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, expected)


def test_the_lltm_cells_plain_path_is_one_cpp_node_that_autograd_treats_as_any():
    """ops.lltm's lean path is a C++ autograd Function: retain_graph runs it twice alike,
    saved tensors go through saved_tensors_hooks, an in-place write to a result it saved
    is refused, and an output left out of the loss is a zero gradient (float64 reference)."""
    g = torch.Generator().manual_seed(3)
    shapes = [(4, 5), (9, 8), (9,), (4, 3), (4, 3)]
    args = [torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in shapes]
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        h, c = ops.lltm(*args)
    assert type(h.grad_fn).__name__ == "CppFunction" and len(packed) == 4
    want_h, want_c = reference.lltm(*args)
    for loss, want in ((h.sum(), want_h.sum()), (c.sum(), want_c.sum())):
        first = torch.autograd.grad(loss, args, retain_graph=True)
        again = torch.autograd.grad(loss, args, retain_graph=True)
        expected = torch.autograd.grad(want, args, retain_graph=True)
        for a, b, e in zip(first, again, expected):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
            torch.testing.assert_close(a, e)
    h, c = ops.lltm(*args)
    c.mul_(2)  # (new_cell is saved for backward)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h.sum().backward()
