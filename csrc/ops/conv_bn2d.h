// Fused Conv2d + BatchNorm2d: declarations shared by the kernels.
//
// Shapes: input N×C_in×H×W, weight C_out×C_in×kH×kW, gamma and beta C_out (optional),
// stride and padding two ints each; no bias, dilation 1, one group. The convolution output
// z is N×C_out×H_out×W_out.
//
// Operators:
//   conv_bn2d_forward (training) returns (output, mean, var): the batch-normalised z, and
//     z's per-channel mean and biased variance (in stats_dtype). Backward needs only
//     input, weight, gamma and these statistics: it recomputes z, so nothing of z's size
//     is kept between the passes.
//   conv_bn2d_backward: the gradients of input, weight, gamma and beta.
//   conv_bn2d_eval (inference): the running statistics folded into the convolution's
//     weight and bias, one conv2d (composed of ATen calls, differentiable through them).
//   conv_bn2d_update_stats: running = (1 - momentum) * running + momentum * batch, the
//     variance made unbiased, in place; given the forward's output, whose shape says how
//     many values each statistic is over and whose dtype the running statistics have.
// Every output is allocated (or, where ATen computes it, shaped) by the functions below
// for the CPU, CUDA and meta kernels alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/DimVector.h>

#include <array>
#include <optional>
#include <tuple>

namespace tensortools::conv_bn2d {

// The dtype of the statistics (mean, var) for an input dtype: float for the half types,
// which compute in float, else the input's.
at::ScalarType stats_dtype(at::ScalarType input);

// Validates the forward (training) arguments: ranks, shapes, dtypes in `allowed`, one
// device, at least one input channel, the geometry giving a non-empty output, eps >= 0,
// and more than one value per channel to take statistics of. Returns the output shape.
c10::SymDimVector check_forward_args(const at::Tensor& input, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& gamma,
                                     const std::optional<at::Tensor>& beta, at::IntArrayRef stride,
                                     at::IntArrayRef padding, double eps,
                                     c10::ArrayRef<at::ScalarType> allowed);

// Validates the backward arguments against the forward ones.
void check_backward_args(const at::Tensor& grad_output, const at::Tensor& input,
                         const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
                         const at::Tensor& mean, const at::Tensor& var, at::IntArrayRef stride,
                         at::IntArrayRef padding, double eps,
                         c10::ArrayRef<at::ScalarType> allowed);

// (output, mean, var) of conv_bn2d_forward for the meta kernel; the CPU and CUDA kernels
// compute the output with `convolve` (whose shape is checked against the same rule) and
// allocate mean and var with `allocate_stats`.
std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_forward(const at::Tensor& input,
                                                                const at::Tensor& weight,
                                                                c10::SymIntArrayRef shape);
at::Tensor allocate_stats(const at::Tensor& input, const c10::SymInt& channels);

// The gradients of conv_bn2d_backward: grad_input and grad_weight contiguous, of input's
// and weight's shapes; grad_gamma and grad_beta C_out of input's dtype; undefined where
// output_mask is false.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> allocate_backward(
    const at::Tensor& input, const at::Tensor& weight, std::array<bool, 3> output_mask);

// z = conv2d(input, weight) with the operator's geometry, contiguous (NCHW), of `shape`.
at::Tensor convolve(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                    at::IntArrayRef padding, c10::SymIntArrayRef shape);

// Gradients of conv2d(input, weight) for input and weight (as masked) given grad_z,
// contiguous (as allocate_backward describes them).
std::tuple<at::Tensor, at::Tensor> convolve_backward(
    const at::Tensor& grad_z, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, std::array<bool, 2> mask);

}  // namespace tensortools::conv_bn2d
