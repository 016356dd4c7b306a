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

#include "../checks.h"

namespace tensortools::lltm {

// Calls of the registered operators through the dispatcher (any device, with autograd).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward(const at::Tensor& input,
                                                                        const at::Tensor& weights,
                                                                        const at::Tensor& bias,
                                                                        const at::Tensor& old_h,
                                                                        const at::Tensor& old_cell);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_backward(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights);

// The operators' outputs, allocated here for every backend's kernel and the meta kernel
// alike, so that their shapes, dtypes and strides cannot differ: (new_h, new_cell, gates,
// X) of lltm_forward and (d_input, d_weights, d_bias, d_old_h, d_old_cell) of
// lltm_backward, all contiguous, with the options of `input` (forward) and `X` (backward).
using ForwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using BackwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
ForwardOutputs allocate_forward(const at::Tensor& input, const at::Tensor& old_h);
BackwardOutputs allocate_backward(const at::Tensor& new_cell, const at::Tensor& X);

// Where every backend's forward kernel starts: the outputs allocated, X = [old_h | input]
// and the pre-activation gates X @ weights.T + bias (B×3S, ATen's matrix product) written
// into them, and old_cell made contiguous.
struct ForwardBuffers {
  at::Tensor X, gates, old_cell, new_h, new_cell;
};
ForwardBuffers forward_buffers(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h,
                               const at::Tensor& old_cell);

// Where every backend's backward kernel starts: its inputs made contiguous once
// (gradients from reductions are often expanded), the outputs allocated and the gradient
// of the pre-activation gates (d_gates, B×3S) to fill.
struct BackwardBuffers {
  at::Tensor grad_h, grad_cell, new_cell, gates, d_gates;
  at::Tensor d_input, d_weights, d_bias, d_old_h, d_old_cell;
  BackwardOutputs outputs() const { return {d_input, d_weights, d_bias, d_old_h, d_old_cell}; }
};
BackwardBuffers backward_buffers(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                 const at::Tensor& new_cell, const at::Tensor& gates,
                                 const at::Tensor& X);

// The matrix products of the backward pass, from the filled d_gates: writes d_input,
// d_weights, d_bias and d_old_h. Every backend's kernel finishes with it.
void backward_products(BackwardBuffers& buf, const at::Tensor& X, const at::Tensor& weights);

// The checks of a step's arguments, shared by the cell and the sequence: every argument's
// kind, dtype and device; `input` of rank `input_dim` (batch x features in its last two
// dimensions, `input_meaning` says what all are), h (B×S); the shapes of the cell (B×S),
// weights (3S×(S+F)) and bias (3S) that B, F and S imply.
void check_step_args(const char* op, const Arg& input, int64_t input_dim, const char* input_meaning,
                     const Arg& weights, const Arg& bias, const Arg& h, const Arg& cell,
                     c10::ArrayRef<at::ScalarType> allowed);

// The cell's pointwise pass on pre-activation gates computed elsewhere (B×3S): the operators
// lltm_gates_forward(gates, old_cell) -> (new_h, new_cell, activated), activated holding the
// activated gates side by side as lltm_forward's gates does, and lltm_gates_backward(grad_h,
// grad_cell, new_cell, activated) -> (d_gates, d_old_cell). Their outputs, allocated here
// for every backend's kernel and the meta kernel (contiguous, with the options of the first
// argument), and the checks of their arguments.
using GatesForwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using GatesBackwardOutputs = std::tuple<at::Tensor, at::Tensor>;
GatesForwardOutputs allocate_gates_forward(const at::Tensor& gates, const at::Tensor& old_cell);
GatesBackwardOutputs allocate_gates_backward(const at::Tensor& new_cell);
void check_gates_forward_args(const at::Tensor& gates, const at::Tensor& old_cell,
                              c10::ArrayRef<at::ScalarType> allowed);
void check_gates_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                               const at::Tensor& new_cell, const at::Tensor& activated,
                               c10::ArrayRef<at::ScalarType> allowed);

// Validates the forward arguments (ranks, shapes, dtypes in `allowed`, one device).
void check_forward_args(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                        const at::Tensor& old_h, const at::Tensor& old_cell,
                        c10::ArrayRef<at::ScalarType> allowed);

// Validates the backward arguments against each other.
void check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& X,
                         const at::Tensor& weights, c10::ArrayRef<at::ScalarType> allowed);

}  // namespace tensortools::lltm
