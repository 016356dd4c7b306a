"""Graph convolution ``adj @ x @ weight + bias``: ``torch.ops.tensortools.graph_conv``."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function

from tensortools.dispatch.batch_rules import batch_rule
from tensortools.ops._autograd import loop_vmap, register, save
from tensortools.ops._checks import check_tensors, overridden

__all__ = ["graph_conv"]


@batch_rule(rows=(0,), min_ndim=2)  # (a batch of adjacency rows)
def graph_conv(adj: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``adj @ x @ weight + bias``, multiplying in the cheaper order for the shapes.

    ``adj`` N×N (dense, sparse COO or sparse CSR, not hybrid), ``x`` N×F_in, ``weight``
    F_in×F_out, ``bias`` F_out or None; one floating dtype and device. Returns N×F_out.
    Gradients flow to ``x``, ``weight``, ``bias`` and a dense ``adj``. Under
    ``torch.autocast`` the products' result is in the autocast dtype and ``bias`` is
    added as it is, as in ``adj @ x @ weight + bias`` there.
    """
    relevant = (adj, x, weight) if bias is None else (adj, x, weight, bias)
    if overridden(relevant):
        return handle_torch_function(graph_conv, relevant, adj, x, weight, bias)
    check_tensors("graph_conv", ("x", "weight"), (x, weight))
    if not isinstance(adj, Tensor):
        raise TypeError(
            f"tensortools.ops.graph_conv: 'adj' must be a torch.Tensor, got {type(adj).__name__}"
        )
    if bias is not None:
        check_tensors("graph_conv", ("bias",), (bias,))
    return _graph_conv(adj, x, weight, bias)


def _graph_conv_setup(ctx, inputs, output):
    adj, x, weight, bias = inputs
    save(ctx, adj, x, weight)
    ctx.output_shape = output.shape


def _graph_conv_backward(ctx, grad):
    adj, x, weight = ctx.saved_tensors
    need_adj, need_x, need_weight, need_bias = ctx.needs_input_grad
    grad_adj = grad_x = grad_weight = grad_bias = None
    if need_x:
        grad_x = adj.t() @ (grad @ weight.t())
    if need_weight:
        grad_weight = (adj @ x).t() @ grad
    if need_bias:
        grad_bias = grad.sum(0)
    if need_adj:
        if adj.layout != torch.strided:
            raise RuntimeError(
                "tensortools.ops.graph_conv: no gradient for a sparse 'adj'; "
                "pass a dense adj, or one that does not require grad"
            )
        grad_adj = grad @ (x @ weight).t()
    return grad_adj, grad_x, grad_weight, grad_bias


def _graph_conv_jvp(ctx, t_adj, t_x, t_weight, t_bias):
    # The products are linear in each of adj, x and weight: one product per tangent (a
    # sparse adj's tangent is sparse too, which the operator takes).
    adj, x, weight = ctx.saved_tensors
    tangent = None
    for args in ((t_adj, x, weight), (adj, t_x, weight), (adj, x, t_weight)):
        if all(a is not None for a in args):
            term = torch.ops.tensortools.graph_conv.default(*args, None)
            tangent = term if tangent is None else tangent + term
    if t_bias is not None:
        tangent = t_bias.expand(ctx.output_shape) if tangent is None else tangent + t_bias
    return tangent


_graph_conv = register(
    "tensortools::graph_conv",
    setup_context=_graph_conv_setup,
    backward=_graph_conv_backward,
    jvp=_graph_conv_jvp,
    # A sample's x is not a block of rows of adj's product: a loop.
    vmap=loop_vmap(torch.ops.tensortools.graph_conv.default),
)
