// LLTM recurrent cell: schema-level declarations shared by the CPU and CUDA kernels.
//
// Shapes (B batch, F input features, S state size):
//   input B×F, weights 3S×(S+F), bias 3S, old_h B×S, old_cell B×S.
// lltm_forward returns (new_h, new_cell, gates, X) where gates (B×3S) holds the activated
// input gate, output gate and candidate cell side by side and X = cat([old_h, input], 1);
// both are what lltm_backward needs and nothing more.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <tuple>

namespace tensortools::lltm {

// Calls of the registered operators through the dispatcher (any device, with autograd).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_backward(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights);

// Where every backend's forward kernel starts: X = [old_h | input], the pre-activation
// gates X @ weights.T + bias (B×3S, ATen's matrix product), old_cell made contiguous, and
// the two outputs to fill.
struct ForwardBuffers {
  at::Tensor X, gates, old_cell, new_h, new_cell;
};
ForwardBuffers forward_buffers(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h,
                               const at::Tensor& old_cell);

// Where every backend's backward kernel starts: its inputs made contiguous once
// (gradients from reductions are often expanded) and the two pointwise outputs to fill.
struct BackwardBuffers {
  at::Tensor grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell;
};
BackwardBuffers backward_buffers(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                 const at::Tensor& new_cell, const at::Tensor& gates);

// The matrix products of the backward pass, from the gradient of the pre-activation
// gates (B×3S): returns (d_input, d_weights, d_bias, d_old_h). Every backend's kernel
// finishes with it.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_products(
    const at::Tensor& d_gates, const at::Tensor& X, const at::Tensor& weights, int64_t S);

// Validates the forward arguments (ranks, shapes, dtypes in `allowed`, one device).
void check_forward_args(const at::Tensor& input, const at::Tensor& weights,
                        const at::Tensor& bias, const at::Tensor& old_h,
                        const at::Tensor& old_cell, c10::ArrayRef<at::ScalarType> allowed);

// Validates the backward arguments against each other.
void check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& X, const at::Tensor& weights,
                         c10::ArrayRef<at::ScalarType> allowed);

}  // namespace tensortools::lltm
