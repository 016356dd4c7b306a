// LLTM: operator schemas, argument checks, output allocation and the meta kernels.
// The CPU and CUDA kernels live in cpu/ and cuda/.
#include "lltm.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "../checks.h"

namespace tensortools::lltm {

namespace {
constexpr const char* kForward = "tensortools.lltm";
constexpr const char* kBackward = "tensortools.lltm_backward";
constexpr const char* kGatesForward = "tensortools.lltm_gates_forward";
constexpr const char* kGatesBackward = "tensortools.lltm_gates_backward";
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

ForwardOutputs allocate_forward(const at::Tensor& input, const at::Tensor& old_h) {
  const c10::SymInt B = input.sym_size(0), F = input.sym_size(1), S = old_h.sym_size(1);
  const auto options = input.options();
  return {at::empty_symint({B, S}, options), at::empty_symint({B, S}, options),
          at::empty_symint({B, 3 * S}, options), at::empty_symint({B, S + F}, options)};
}

BackwardOutputs allocate_backward(const at::Tensor& new_cell, const at::Tensor& X) {
  const c10::SymInt B = new_cell.sym_size(0), S = new_cell.sym_size(1);
  const c10::SymInt F = X.sym_size(1) - S;
  const auto options = X.options();
  return {at::empty_symint({B, F}, options), at::empty_symint({3 * S, S + F}, options),
          at::empty_symint({3 * S}, options), at::empty_symint({B, S}, options),
          at::empty_symint({B, S}, options)};
}

ForwardBuffers forward_buffers(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h,
                               const at::Tensor& old_cell) {
  // cat and addmm read any strides; only old_cell is read directly by the pointwise pass.
  ForwardBuffers out;
  std::tie(out.new_h, out.new_cell, out.gates, out.X) = allocate_forward(input, old_h);
  at::cat_out(out.X, {old_h, input}, /*dim=*/1);
  at::addmm_out(out.gates, bias, out.X, weights.t());
  out.old_cell = old_cell.contiguous();
  return out;
}

BackwardBuffers backward_buffers(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                 const at::Tensor& new_cell, const at::Tensor& gates,
                                 const at::Tensor& X) {
  BackwardBuffers out;
  out.grad_h = grad_h.contiguous();
  out.grad_cell = grad_cell.contiguous();
  out.new_cell = new_cell.contiguous();
  out.gates = gates.contiguous();
  out.d_gates = at::empty(gates.sizes(), out.gates.options());
  std::tie(out.d_input, out.d_weights, out.d_bias, out.d_old_h, out.d_old_cell) =
      allocate_backward(new_cell, X);
  return out;
}

void backward_products(BackwardBuffers& buf, const at::Tensor& X, const at::Tensor& weights) {
  // X = [old_h | input], so d_X = d_gates @ weights splits by the column blocks of
  // weights: each block's product is written straight into its own contiguous result
  // (the matrix-product libraries read a column block through its stride), which saves
  // forming d_X and copying its halves out.
  const int64_t S = buf.d_old_h.size(1), F = buf.d_input.size(1);
  at::mm_out(buf.d_weights, buf.d_gates.t(), X);
  at::sum_out(buf.d_bias, buf.d_gates, /*dim=*/0);
  at::mm_out(buf.d_old_h, buf.d_gates, weights.narrow(1, 0, S));
  at::mm_out(buf.d_input, buf.d_gates, weights.narrow(1, S, F));
}

void check_step_args(const char* op, const Arg& input, int64_t input_dim, const char* input_meaning,
                     const Arg& weights, const Arg& bias, const Arg& h, const Arg& cell,
                     c10::ArrayRef<at::ScalarType> allowed) {
  checks::common(op, {input, weights, bias, h, cell}, allowed);
  checks::dim(op, input, input_dim, input_meaning);
  checks::dim(op, h, 2, "batch x state_size");
  const c10::SymInt B = input.tensor.sym_size(-2), F = input.tensor.sym_size(-1);
  const c10::SymInt S = h.tensor.sym_size(1);
  checks::same_size(op, h, 0, input, input_dim - 2, "batch size");
  checks::shape(op, cell, {B, S}, "batch x state_size");
  // weights is [3*state_size, state_size + features], state_size from h and features from
  // input: where a 2-D weights disagrees, say with which argument, then the shape it needs
  const c10::SymIntArrayRef W = weights.tensor.sym_sizes();
  if (W.size() == 2) {
    TORCH_CHECK_VALUE(W[0] == 3 * S, op, ": '", weights.name, "' ", W, " has ", W[0], " rows but '",
                      h.name, "' has state_size ", S,
                      " (weights is [3*state_size, state_size + features]); '", weights.name,
                      "' must have shape [", 3 * S, ", ", S + F, "] for these");
    TORCH_CHECK_VALUE(W[1] == S + F, op, ": '", input.name, "' has ", F, " features but '",
                      weights.name, "' ", W, " expects ", W[1] - S,
                      " (weights is [3*state_size, state_size + features], state_size ", S,
                      " from '", h.name, "'); '", weights.name, "' must have shape [", 3 * S, ", ",
                      S + F, "] for these");
  }
  checks::shape(op, weights, {3 * S, S + F}, "3*state_size x (state_size + features)");
  checks::shape(op, bias, {3 * S}, "3*state_size");
}

void check_forward_args(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                        const at::Tensor& old_h, const at::Tensor& old_cell,
                        c10::ArrayRef<at::ScalarType> allowed) {
  check_step_args(kForward, {input, "input"}, 2, "batch x features", {weights, "weights"},
                  {bias, "bias"}, {old_h, "old_h"}, {old_cell, "old_cell"}, allowed);
}

void check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& X,
                         const at::Tensor& weights, c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_grad_h{grad_h, "grad_h"}, a_grad_cell{grad_cell, "grad_cell"},
      a_new_cell{new_cell, "new_cell"}, a_gates{gates, "gates"}, a_X{X, "X"},
      a_weights{weights, "weights"};
  checks::common(kBackward, {a_new_cell, a_grad_h, a_grad_cell, a_gates, a_X, a_weights}, allowed);
  checks::dim(kBackward, a_new_cell, 2, "batch x state_size");
  checks::dim(kBackward, a_X, 2, "batch x (state_size + features)");
  const c10::SymInt B = new_cell.sym_size(0), S = new_cell.sym_size(1), SF = X.sym_size(1);
  checks::shape(kBackward, a_grad_h, {B, S}, "batch x state_size");
  checks::shape(kBackward, a_grad_cell, {B, S}, "batch x state_size");
  checks::shape(kBackward, a_gates, {B, 3 * S}, "batch x 3*state_size");
  checks::shape(kBackward, a_X, {B, SF}, "batch x (state_size + features)");
  checks::shape(kBackward, a_weights, {3 * S, SF}, "3*state_size x (state_size + features)");
  TORCH_CHECK_VALUE(SF >= S, kBackward, ": 'X' must have at least state_size (", S,
                    ") columns, got ", SF);
}

GatesForwardOutputs allocate_gates_forward(const at::Tensor& gates, const at::Tensor& old_cell) {
  const auto options = gates.options();
  const c10::SymInt B = old_cell.sym_size(0), S = old_cell.sym_size(1);
  return {at::empty_symint({B, S}, options), at::empty_symint({B, S}, options),
          at::empty_symint({B, 3 * S}, options)};
}

GatesBackwardOutputs allocate_gates_backward(const at::Tensor& new_cell) {
  const auto options = new_cell.options();
  const c10::SymInt B = new_cell.sym_size(0), S = new_cell.sym_size(1);
  return {at::empty_symint({B, 3 * S}, options), at::empty_symint({B, S}, options)};
}

void check_gates_forward_args(const at::Tensor& gates, const at::Tensor& old_cell,
                              c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_gates{gates, "gates"}, a_old_cell{old_cell, "old_cell"};
  checks::common(kGatesForward, {a_gates, a_old_cell}, allowed);
  checks::dim(kGatesForward, a_old_cell, 2, "batch x state_size");
  checks::dim(kGatesForward, a_gates, 2, "batch x 3*state_size");
  const c10::SymInt B = old_cell.sym_size(0), S = old_cell.sym_size(1);
  checks::shape(kGatesForward, a_gates, {B, 3 * S}, "batch x 3*state_size");
}

void check_gates_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                               const at::Tensor& new_cell, const at::Tensor& activated,
                               c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_grad_h{grad_h, "grad_h"}, a_grad_cell{grad_cell, "grad_cell"},
      a_new_cell{new_cell, "new_cell"}, a_activated{activated, "activated"};
  checks::common(kGatesBackward, {a_new_cell, a_grad_h, a_grad_cell, a_activated}, allowed);
  checks::dim(kGatesBackward, a_new_cell, 2, "batch x state_size");
  const c10::SymInt B = new_cell.sym_size(0), S = new_cell.sym_size(1);
  checks::shape(kGatesBackward, a_grad_h, {B, S}, "batch x state_size");
  checks::shape(kGatesBackward, a_grad_cell, {B, S}, "batch x state_size");
  checks::shape(kGatesBackward, a_activated, {B, 3 * S}, "batch x 3*state_size");
}

namespace {

// The meta kernels (what torch.compile and meta tensors see): the same checks and the same
// output allocation as the CPU and CUDA kernels, and no computation.
ForwardOutputs lltm_forward_meta(const at::Tensor& input, const at::Tensor& weights,
                                 const at::Tensor& bias, const at::Tensor& old_h,
                                 const at::Tensor& old_cell) {
  check_forward_args(input, weights, bias, old_h, old_cell, floating_types_for(input.device()));
  return allocate_forward(input, old_h);
}

BackwardOutputs lltm_backward_meta(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                   const at::Tensor& new_cell, const at::Tensor& gates,
                                   const at::Tensor& X, const at::Tensor& weights) {
  check_backward_args(grad_h, grad_cell, new_cell, gates, X, weights,
                      floating_types_for(new_cell.device()));
  return allocate_backward(new_cell, X);
}

GatesForwardOutputs lltm_gates_forward_meta(const at::Tensor& gates, const at::Tensor& old_cell) {
  check_gates_forward_args(gates, old_cell, floating_types_for(gates.device()));
  return allocate_gates_forward(gates, old_cell);
}

GatesBackwardOutputs lltm_gates_backward_meta(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                              const at::Tensor& new_cell,
                                              const at::Tensor& activated) {
  check_gates_backward_args(grad_h, grad_cell, new_cell, activated,
                            floating_types_for(new_cell.device()));
  return allocate_gates_backward(new_cell);
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, Meta, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_meta);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_meta);
  m.impl("lltm_gates_forward", &tensortools::lltm::lltm_gates_forward_meta);
  m.impl("lltm_gates_backward", &tensortools::lltm::lltm_gates_backward_meta);
}

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
      " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates,"
      " Tensor X, Tensor weights)"
      " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h,"
      " Tensor d_old_cell)");
  m.def(
      "lltm_gates_forward(Tensor gates, Tensor old_cell)"
      " -> (Tensor new_h, Tensor new_cell, Tensor activated)");
  m.def(
      "lltm_gates_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor activated)"
      " -> (Tensor d_gates, Tensor d_old_cell)");
}
