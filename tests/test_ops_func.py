"""The operators under torch.func and forward-mode AD: every transform of each operator
equals the same transform of its plain-PyTorch reference (tensortools.reference), in
float64; gradcheck in forward mode and batched; per-sample gradients of the modules equal
a loop over samples; and what is not provided (second derivatives through the LLTM and
conv-bn backward kernels) says so, naming the operator. The cases are the ``transforms``
of every operator's record (``TestSamples`` of tests/test_ops_<op>.py,
_support/op_records.py)."""

from __future__ import annotations

import pytest
import torch
from _support.op_records import cases
from torch import func
from torch.autograd import forward_ad

from tensortools import nn, ops
from tensortools.ops import _autograd

D = torch.float64
F, S, T = 4, 2, 3  # features, state, steps of the per-sample gradients


def _r(*shape):
    return torch.randn(*shape, dtype=D)


#: name -> Transform: the ``transforms`` of every operator's record (tests/test_ops_<op>.py).
CASES = cases("transforms")


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _case(name):
    op, ref, shapes, in_dims = CASES[name][:4]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))

    def make(shape):
        return torch.randn(shape, dtype=D, generator=gen)

    args = tuple(make(s) for s in shapes)
    cotangents = [make(t.shape) for t in _leaves(ref(*args))]
    tangents = tuple(make(a.shape) for a in args)
    batched = tuple(
        a if d is None else torch.stack([a, make(a.shape), make(a.shape)], d)
        for a, d in zip(args, in_dims)
    )
    return op, ref, args, cotangents, tangents, batched, in_dims


def _loss(fn, cotangents):
    def loss(*args):
        return sum((o * c).sum() for o, c in zip(_leaves(fn(*args)), cotangents))

    return loss


def _transforms(fn, args, cotangents, tangents, batched, in_dims):
    argnums = tuple(range(len(args)))
    loss = _loss(fn, cotangents)

    def vjp():
        out, pullback = func.vjp(fn, *args)
        return pullback(
            torch.utils._pytree.tree_unflatten(cotangents, torch.utils._pytree.tree_structure(out))
        )

    return {
        "grad": lambda: func.grad(loss, argnums=argnums)(*args),
        "vjp": vjp,
        "jacrev": lambda: func.jacrev(fn, argnums=argnums)(*args),
        "jvp": lambda: func.jvp(fn, args, tangents),
        "jacfwd": lambda: func.jacfwd(fn, argnums=argnums)(*args),
        "vmap": lambda: func.vmap(fn, in_dims=in_dims)(*batched),
        "vmap_grad": lambda: func.vmap(func.grad(loss, argnums=argnums), in_dims=in_dims)(*batched),
        "grad_vmap": lambda: func.grad(
            lambda *a: func.vmap(loss, in_dims=in_dims)(*a).sum(), argnums=argnums
        )(*batched),
        "vmap_jvp": lambda: func.vmap(lambda *a: func.jvp(fn, a, tangents)[1], in_dims=in_dims)(
            *batched
        ),
    }


TRANSFORMS = [
    "grad",
    "vjp",
    "jacrev",
    "jvp",
    "jacfwd",
    "vmap",
    "vmap_grad",
    "grad_vmap",
    "vmap_jvp",
]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_transform_matches_reference(name, transform):
    op, ref, *rest = _case(name)
    got = _leaves(_transforms(op, *rest)[transform]())
    want = _leaves(_transforms(ref, *rest)[transform]())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_ad(name):
    # torch.autograd.forward_ad without torch.func: the tangent of every output.
    op, ref, args, _, tangents, _, _ = _case(name)
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(a, t) for a, t in zip(args, tangents)]
        got = [forward_ad.unpack_dual(o).tangent for o in _leaves(op(*duals))]
        want = [forward_ad.unpack_dual(o).tangent for o in _leaves(ref(*duals))]
    for g, w in zip(got, want):
        assert g is not None
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


def _marked(test):
    """The cases' names, those whose record says `test` takes over a second for them in
    the slow set."""
    return [
        pytest.param(n, marks=pytest.mark.slow) if test in CASES[n].slow else n
        for n in sorted(CASES)
    ]


def test_every_operator_has_transform_cases():
    # a new operator's record gives its transforms (docs/adding-an-operator.md, step 4)
    assert set(ops.__all__) <= {case.operator for case in CASES.values()}


@pytest.mark.parametrize("name", _marked("second_order"))
def test_second_order(name):
    op, ref, args, cotangents, *_ = _case(name)
    ref = CASES[name].second_order_reference or ref
    argnums = tuple(range(len(args)))
    loss, ref_loss = _loss(op, cotangents), _loss(ref, cotangents)
    # Reverse over forward mode differentiates the tangent formulas: every operator.
    torch.testing.assert_close(
        _leaves(func.jacrev(func.jacfwd(loss, argnums=argnums), argnums=argnums)(*args)),
        _leaves(func.jacrev(func.jacfwd(ref_loss, argnums=argnums), argnums=argnums)(*args)),
    )
    refused = CASES[name].operator if CASES[name].no_double_backward else None
    if refused is not None:
        match = f"tensortools.ops.{refused} does not support double backward"
        with pytest.raises(RuntimeError, match=match):
            func.hessian(loss)(*args)
        leaves = [a.detach().requires_grad_() for a in args]
        (g,) = torch.autograd.grad(loss(*leaves), leaves[0], create_graph=True)
        with pytest.raises(RuntimeError, match=match):
            torch.autograd.grad(g.sum(), leaves[0])
        return
    torch.testing.assert_close(
        _leaves(func.hessian(loss, argnums=argnums)(*args)),
        _leaves(func.hessian(ref_loss, argnums=argnums)(*args)),
    )
    # reverse over reverse and forward over reverse (the tangent of the gradient)
    assert torch.autograd.gradgradcheck(
        loss, tuple(a.requires_grad_() for a in args), check_fwd_over_rev=True
    )


@pytest.mark.parametrize("name", _marked("gradcheck"))
def test_gradcheck_forward_and_batched(name):
    op, _, args, *_ = _case(name)
    args = tuple(a.requires_grad_() for a in args)
    assert torch.autograd.gradcheck(
        op,
        args,
        check_forward_ad=True,
        check_backward_ad=True,
        check_batched_grad=True,
        check_batched_forward_grad=True,
    )


def test_sparse_adj():
    # (torch makes no sparse dual tensor, in forward_ad or torch.func: adj has no tangent)
    adj = _r(4, 4).relu().to_sparse()
    x, w, t_x = _r(4, 3), _r(3, 2), _r(4, 3)
    _, tangent = func.jvp(lambda x: ops.graph_conv(adj, x, w), (x,), (t_x,))
    torch.testing.assert_close(tangent, adj.to_dense() @ t_x @ w)


# Per-sample gradients, as DP-SGD takes them: vmap(grad) over functional_call.


def _per_sample_grads(module, loss_of_sample, samples):
    params = {k: v.detach() for k, v in module.named_parameters()}

    def loss(params, sample):
        return loss_of_sample(lambda *a: torch.func.functional_call(module, params, a), sample)

    got = func.vmap(func.grad(loss), in_dims=(None, 0))(params, samples)
    for i in range(samples.shape[0]):
        module.zero_grad()
        loss_of_sample(module, samples[i]).backward()
        for k, p in module.named_parameters():
            torch.testing.assert_close(got[k][i], p.grad, rtol=1e-9, atol=1e-9)


def test_per_sample_grads_lltm():
    cell = nn.LLTM(F, S).double()

    def loss(call, x):  # one sample: a row of features
        x = x.unsqueeze(0)
        h, c = call(x, (torch.zeros(1, S, dtype=D), torch.zeros(1, S, dtype=D)))
        h, c = call(x, (h, c))
        return (h * h).sum() + c.sum()

    _per_sample_grads(cell, loss, _r(5, F))


def test_per_sample_grads_lltm_sequence():
    model = nn.LLTMSequence(F, S, batch_first=True).double()

    def loss(call, x):  # one sample: a sequence T×F
        output, (h_n, c_n) = call(x.unsqueeze(0))
        return output.pow(2).sum() + c_n.sum()

    _per_sample_grads(model, loss, _r(4, T, F))


def test_per_sample_grads_graph_conv():
    layer = nn.GraphConv(3, 2).double()
    adj = _r(4, 4)

    def loss(call, x):
        return call(adj, x).pow(2).sum()

    _per_sample_grads(layer, loss, _r(3, 4, 3))


@pytest.mark.parametrize("training", [True, False])
def test_per_sample_grads_fused_conv_bn2d(training):
    # Training without running statistics: vmap cannot update one buffer per sample.
    layer = nn.FusedConvBN2d(2, 3, 3, padding=1, track_running_stats=not training)
    layer = layer.double().train(training)

    def loss(call, x):  # one sample: a batch of two images, its own statistics
        return call(x).pow(2).sum()

    _per_sample_grads(layer, loss, _r(3, 2, 2, 4, 4))


def test_no_derivative_wanted_takes_the_plain_path():
    # The Autograd kernels apply their Function only where a derivative can be asked for.
    x = _r(2, 2)
    assert not _autograd.wants_autograd((x,))
    assert _autograd.wants_autograd((x.requires_grad_(),))
    with torch.no_grad():
        assert not _autograd.wants_autograd((x,))
    with forward_ad.dual_level():
        assert _autograd.wants_autograd((_r(2),))
    assert func.vmap(lambda t: torch.tensor(_autograd.wants_autograd((t,))))(_r(2, 2)).all()
