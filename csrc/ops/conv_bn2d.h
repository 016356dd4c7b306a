// Fused Conv2d + BatchNorm2d for training: schema-level declarations shared by the kernels.
//
// Shapes: input N×C_in×H×W, weight C_out×C_in×kH×kW, gamma and beta C_out (optional),
// stride and padding two ints each; no bias, dilation 1, one group. The convolution output
// z is N×C_out×H_out×W_out.
//
// conv_bn2d_forward returns (output, mean, var): the batch-normalised z, and z's
// per-channel mean and biased variance (in stats_dtype). Backward needs only input, weight, gamma and these
// statistics: it recomputes z, so nothing of z's size is kept between the passes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <array>
#include <optional>

namespace tensortools::conv_bn2d {

// The dtype of the statistics (mean, var) for an input dtype: float for the half types,
// which compute in float, else the input's.
at::ScalarType stats_dtype(at::ScalarType input);

// Validates the forward arguments (ranks, shapes, dtypes in `allowed`, one device, the
// geometry giving a non-empty output).
void check_forward_args(const at::Tensor& input, const at::Tensor& weight,
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

// z = conv2d(input, weight) with the operator's geometry, contiguous (NCHW).
at::Tensor convolve(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                    at::IntArrayRef padding);

// Gradients of conv2d(input, weight) for input and weight (as masked) given grad_z.
std::tuple<at::Tensor, at::Tensor> convolve_backward(const at::Tensor& grad_z,
                                                     const at::Tensor& input,
                                                     const at::Tensor& weight,
                                                     at::IntArrayRef stride,
                                                     at::IntArrayRef padding,
                                                     std::array<bool, 2> mask);

}  // namespace tensortools::conv_bn2d
