// LLTM autograd, registered for the Autograd key so that every caller of the operator
// (Python, C++, torch.compile) gets the hand-written backward without a Python layer.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../lltm.h"

namespace tensortools::lltm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The backward operator as a function of its own, so that differentiating it (double
// backward) fails loudly; otherwise autograd would record the matrix products inside the
// kernel but not its pointwise pass and return a wrong second derivative.
class LLTMBackwardFunction : public torch::autograd::Function<LLTMBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/, const at::Tensor& grad_h,
                               const at::Tensor& grad_cell, const at::Tensor& new_cell,
                               const at::Tensor& gates, const at::Tensor& X,
                               const at::Tensor& weights) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] =
        lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grads*/) {
    TORCH_CHECK(false,
                "tensortools.ops.lltm does not support double backward (differentiating its "
                "gradient); use tensortools.reference.lltm for higher-order gradients");
  }
};

class LLTMFunction : public torch::autograd::Function<LLTMFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& weights, const at::Tensor& bias,
                               const at::Tensor& old_h, const at::Tensor& old_cell) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [new_h, new_cell, gates, X] = lltm_forward(input, weights, bias, old_h, old_cell);
    ctx->save_for_backward({new_cell, gates, X, weights});
    ctx->mark_non_differentiable({gates, X});
    // gates and X never get gradients; zeros for them would be allocated for nothing.
    ctx->set_materialize_grads(false);
    return {new_h, new_cell, gates, X};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& new_cell = saved[0];
    // An output that did not reach the loss has an undefined gradient: it is zero.
    const at::Tensor grad_h = grads[0].defined() ? grads[0] : at::zeros_like(new_cell);
    const at::Tensor grad_cell = grads[1].defined() ? grads[1] : at::zeros_like(new_cell);
    return LLTMBackwardFunction::apply(grad_h, grad_cell, new_cell, saved[1], saved[2], saved[3]);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward_autograd(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  auto out = LLTMFunction::apply(input, weights, bias, old_h, old_cell);
  return {out[0], out[1], out[2], out[3]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_backward_autograd(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights) {
  auto out = LLTMBackwardFunction::apply(grad_h, grad_cell, new_cell, gates, X, weights);
  return {out[0], out[1], out[2], out[3], out[4]};
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, Autograd, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_autograd);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_autograd);
}
