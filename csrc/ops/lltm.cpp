// LLTM: operator schemas and argument checks. Kernels live in cpu/ and cuda/.
#include "lltm.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "../checks.h"

namespace tensortools::lltm {

namespace {
constexpr const char* kForward = "tensortools.lltm";
constexpr const char* kBackward = "tensortools.lltm_backward";
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tensortools::lltm_forward", "")
                       .typed<decltype(lltm_forward)>();
  return op.call(input, weights, bias, old_h, old_cell);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_backward(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tensortools::lltm_backward", "")
                       .typed<decltype(lltm_backward)>();
  return op.call(grad_h, grad_cell, new_cell, gates, X, weights);
}

ForwardBuffers forward_buffers(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h,
                               const at::Tensor& old_cell) {
  // cat and addmm accept any strides and produce contiguous results; only old_cell is
  // read directly by the pointwise pass.
  const int64_t B = input.size(0), S = old_h.size(1);
  ForwardBuffers out;
  out.X = at::cat({old_h, input}, /*dim=*/1);
  out.gates = at::addmm(bias, out.X, weights.t());
  out.old_cell = old_cell.contiguous();
  out.new_h = at::empty({B, S}, out.old_cell.options());
  out.new_cell = at::empty({B, S}, out.old_cell.options());
  return out;
}

BackwardBuffers backward_buffers(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                 const at::Tensor& new_cell, const at::Tensor& gates) {
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  BackwardBuffers out{grad_h.contiguous(), grad_cell.contiguous(), new_cell.contiguous(),
                      gates.contiguous(), {}, {}};
  out.d_gates = at::empty({B, 3 * S}, out.gates.options());
  out.d_old_cell = at::empty({B, S}, out.gates.options());
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_products(
    const at::Tensor& d_gates, const at::Tensor& X, const at::Tensor& weights, int64_t S) {
  // X = [old_h | input], so d_X = d_gates @ weights splits by the column blocks of
  // weights: each block's product is written straight into its own contiguous result
  // (the matrix-product libraries read a column block through its stride), which saves
  // forming d_X and copying its halves out.
  const int64_t B = d_gates.size(0), F = X.size(1) - S;
  at::Tensor d_weights = at::mm(d_gates.t(), X);
  at::Tensor d_bias = d_gates.sum(/*dim=*/0);
  at::Tensor d_old_h = at::empty({B, S}, d_gates.options());
  at::Tensor d_input = at::empty({B, F}, d_gates.options());
  at::mm_out(d_old_h, d_gates, weights.narrow(1, 0, S));
  at::mm_out(d_input, d_gates, weights.narrow(1, S, F));
  return {d_input, d_weights, d_bias, d_old_h};
}

void check_forward_args(const at::Tensor& input, const at::Tensor& weights,
                        const at::Tensor& bias, const at::Tensor& old_h,
                        const at::Tensor& old_cell, c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_input{input, "input"}, a_weights{weights, "weights"}, a_bias{bias, "bias"},
      a_old_h{old_h, "old_h"}, a_old_cell{old_cell, "old_cell"};
  checks::common(kForward, {a_input, a_weights, a_bias, a_old_h, a_old_cell}, allowed);
  checks::dim(kForward, a_input, 2, "batch x features");
  checks::dim(kForward, a_old_h, 2, "batch x state_size");
  const int64_t B = input.size(0), F = input.size(1), S = old_h.size(1);
  checks::same_size(kForward, a_old_h, 0, a_input, 0, "batch size");
  checks::shape(kForward, a_old_cell, {B, S}, "batch x state_size");
  checks::shape(kForward, a_weights, {3 * S, S + F},
                "3*state_size x (state_size + features)");
  checks::shape(kForward, a_bias, {3 * S}, "3*state_size");
}

void check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& X, const at::Tensor& weights,
                         c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_grad_h{grad_h, "grad_h"}, a_grad_cell{grad_cell, "grad_cell"},
      a_new_cell{new_cell, "new_cell"}, a_gates{gates, "gates"}, a_X{X, "X"},
      a_weights{weights, "weights"};
  checks::common(kBackward, {a_new_cell, a_grad_h, a_grad_cell, a_gates, a_X, a_weights},
                 allowed);
  checks::dim(kBackward, a_new_cell, 2, "batch x state_size");
  checks::dim(kBackward, a_X, 2, "batch x (state_size + features)");
  const int64_t B = new_cell.size(0), S = new_cell.size(1), SF = X.size(1);
  checks::shape(kBackward, a_grad_h, {B, S}, "batch x state_size");
  checks::shape(kBackward, a_grad_cell, {B, S}, "batch x state_size");
  checks::shape(kBackward, a_gates, {B, 3 * S}, "batch x 3*state_size");
  checks::shape(kBackward, a_X, {B, SF}, "batch x (state_size + features)");
  checks::shape(kBackward, a_weights, {3 * S, SF}, "3*state_size x (state_size + features)");
  TORCH_CHECK_VALUE(SF >= S, kBackward, ": 'X' must have at least state_size (", S,
                    ") columns, got ", SF);
}

}  // namespace tensortools::lltm

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
      " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates,"
      " Tensor X, Tensor weights)"
      " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h,"
      " Tensor d_old_cell)");
}
