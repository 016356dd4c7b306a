"""Graph convolution ``adj @ x @ weight + bias``: ``torch.ops.tensortools.graph_conv``."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_tensors

__all__ = ["graph_conv"]


def graph_conv(adj: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``adj @ x @ weight + bias``, multiplying in the cheaper order for the shapes.

    ``adj`` N×N (dense, sparse COO or sparse CSR, not hybrid), ``x`` N×F_in, ``weight``
    F_in×F_out, ``bias`` F_out or None; one floating dtype and device. Returns N×F_out.
    Gradients flow to ``x``, ``weight``, ``bias`` and a dense ``adj``. Under
    ``torch.autocast`` the products' result is in the autocast dtype and ``bias`` is
    added as it is, as in ``adj @ x @ weight + bias`` there.
    """
    relevant = (adj, x, weight) if bias is None else (adj, x, weight, bias)
    if has_torch_function(relevant):
        return handle_torch_function(graph_conv, relevant, adj, x, weight, bias)
    check_tensors("graph_conv", ("x", "weight"), (x, weight))
    if not isinstance(adj, Tensor):
        raise TypeError(
            f"tensortools.ops.graph_conv: 'adj' must be a torch.Tensor, got {type(adj).__name__}"
        )
    if bias is not None:
        check_tensors("graph_conv", ("bias",), (bias,))
    return torch.ops.tensortools.graph_conv.default(adj, x, weight, bias)


def _graph_conv_setup(ctx, inputs, output):
    adj, x, weight, bias = inputs
    ctx.save_for_backward(adj, x, weight)


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


torch.library.register_autograd(
    "tensortools::graph_conv", _graph_conv_backward, setup_context=_graph_conv_setup
)
