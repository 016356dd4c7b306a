// LLTM autograd, registered for the Autograd key so that every caller of the operator
// (Python, C++, torch.compile) gets the hand-written backward without a Python layer.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../lltm.h"
#include "../lltm_sequence.h"

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

// The sequence operator, in the same two parts: its backward refuses to be differentiated.
class LLTMSequenceBackwardFunction
    : public torch::autograd::Function<LLTMSequenceBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/, const at::Tensor& grad_output,
                               const at::Tensor& grad_h_n, const at::Tensor& grad_c_n,
                               const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& h0, const at::Tensor& output,
                               const at::Tensor& cells, const at::Tensor& gates,
                               std::array<bool, 3> output_mask) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [d_input, d_weights, d_bias, d_h0, d_c0] = lltm_sequence_backward(
        grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells, gates, output_mask);
    // A Function's outputs must be tensors: a gradient left out (undefined) travels as an
    // empty placeholder, which LLTMSequenceFunction::backward turns back into "none".
    for (at::Tensor* d : {&d_input, &d_weights, &d_bias}) {
      if (!d->defined()) {
        *d = at::empty({0}, h0.options());
      }
    }
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grads*/) {
    TORCH_CHECK(false,
                "tensortools.ops.lltm_sequence does not support double backward (differentiating "
                "its gradient); use tensortools.reference.lltm_sequence for higher-order "
                "gradients");
  }
};

class LLTMSequenceFunction : public torch::autograd::Function<LLTMSequenceFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& weights, const at::Tensor& bias,
                               const at::Tensor& h0, const at::Tensor& c0) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, h_n, c_n, cells, gates] = lltm_sequence_forward(input, weights, bias, h0, c0);
    // Not c0: the gradients do not depend on it (so a caller may reuse its buffer).
    ctx->save_for_backward({input, weights, h0, output, cells, gates});
    ctx->mark_non_differentiable({cells, gates});
    ctx->set_materialize_grads(false);
    return {output, h_n, c_n, cells, gates};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weights = saved[1], &h0 = saved[2];
    const at::Tensor &output = saved[3], &cells = saved[4], &gates = saved[5];
    // An output that did not reach the loss has an undefined gradient: it is zero.
    const at::Tensor grad_output = grads[0].defined() ? grads[0] : at::zeros_like(output);
    const at::Tensor grad_h_n = grads[1].defined() ? grads[1] : at::zeros_like(h0);
    const at::Tensor grad_c_n = grads[2].defined() ? grads[2] : at::zeros_like(h0);
    // Only the gradients autograd will use: the input of a sequence model seldom needs
    // one, and its product is a third of the backward's work when F >> S.
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    variable_list out = LLTMSequenceBackwardFunction::apply(
        grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells, gates, mask);
    for (size_t i = 0; i < mask.size(); ++i) {
      if (!mask[i]) {
        out[i] = at::Tensor();
      }
    }
    return out;
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

SequenceForwardOutputs lltm_sequence_forward_autograd(const at::Tensor& input,
                                                      const at::Tensor& weights,
                                                      const at::Tensor& bias, const at::Tensor& h0,
                                                      const at::Tensor& c0) {
  auto out = LLTMSequenceFunction::apply(input, weights, bias, h0, c0);
  return {out[0], out[1], out[2], out[3], out[4]};
}

SequenceBackwardOutputs lltm_sequence_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& grad_h_n, const at::Tensor& grad_c_n,
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& h0,
    const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
    std::array<bool, 3> output_mask) {
  auto out = LLTMSequenceBackwardFunction::apply(grad_output, grad_h_n, grad_c_n, input, weights,
                                                 h0, output, cells, gates, output_mask);
  const auto wanted = [&](size_t i) { return output_mask[i] ? out[i] : at::Tensor(); };
  return {wanted(0), wanted(1), wanted(2), out[3], out[4]};
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, Autograd, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_autograd);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_autograd);
  m.impl("lltm_sequence_forward", &tensortools::lltm::lltm_sequence_forward_autograd);
  m.impl("lltm_sequence_backward", &tensortools::lltm::lltm_sequence_backward_autograd);
  // For calls that want no gradient (tensortools.ops.lltm_sequence takes it only then):
  // called on inputs that require grad, its results' backward raises.
  m.impl("lltm_sequence_inference", torch::autograd::autogradNotImplementedFallback());
}
