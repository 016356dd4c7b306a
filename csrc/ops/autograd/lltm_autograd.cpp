// Autograd in C++ for the calls that need no torch.func support:
//
// - lltm_sequence_inference, the sequence's forward for calls that want no derivative
//   (tensortools.ops.lltm_sequence takes it only then): called on inputs that require
//   grad, its results' backward raises.
// - lltm_cell_autograd, the LLTM cell's plain path (tensortools.ops.lltm outside torch.func
//   transforms, forward-mode AD, autocast and torch.compile, where a gradient is wanted):
//   one C++ autograd Function over the forward and backward kernels. Measured against the
//   same Function in Python (scripts/lltm_autograd_route.py; docs/performance.md, "The
//   operators' plain path") it saves 14-33% of a step at 16/32/128.
//
// Every operator's registered autograd (backward, tangent formula and batching rule, as
// torch.func needs them) is registered from Python, next to its entry point in
// tensortools/ops/ (see tensortools/ops/_autograd.py); the registered route stays for
// every call this file does not serve.
#include "lltm_autograd.h"

#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../lltm.h"

namespace tensortools::lltm {

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LltmCellFunction : public torch::autograd::Function<LltmCellFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& weights,
                               const Tensor& bias, const Tensor& old_h, const Tensor& old_cell) {
    Tensor new_h, new_cell, gates, X;
    {
      at::AutoDispatchBelowADInplaceOrView below;  // the kernels, past the Autograd key
      std::tie(new_h, new_cell, gates, X) = lltm_forward(input, weights, bias, old_h, old_cell);
    }
    ctx->save_for_backward({new_cell, gates, X, weights});
    ctx->mark_non_differentiable({gates, X});
    ctx->set_materialize_grads(false);  // (gates and X never get a gradient)
    return {new_h, new_cell, gates, X};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& new_cell = saved[0];
    // An output that did not reach the loss has no gradient: it is zero.
    const Tensor grad_h = grads[0].defined() ? grads[0] : at::zeros_like(new_cell);
    const Tensor grad_cell = grads[1].defined() ? grads[1] : at::zeros_like(new_cell);
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> out;
    if (at::GradMode::is_enabled()) {
      // (create_graph: the backward operator's registered route, whose own backward says
      // that differentiating the gradient is not supported)
      out = lltm_backward(grad_h, grad_cell, new_cell, saved[1], saved[2], saved[3]);
    } else {
      at::AutoDispatchBelowADInplaceOrView below;
      out = lltm_backward(grad_h, grad_cell, new_cell, saved[1], saved[2], saved[3]);
    }
    auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] = out;
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
};

}  // namespace

std::vector<Tensor> lltm_cell_autograd(const Tensor& input, const Tensor& weights,
                                       const Tensor& bias, const Tensor& old_h,
                                       const Tensor& old_cell) {
  return LltmCellFunction::apply(input, weights, bias, old_h, old_cell);
}

}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, Autograd, m) {
  m.impl("lltm_sequence_inference", torch::autograd::autogradNotImplementedFallback());
}
