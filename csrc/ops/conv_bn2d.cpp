// conv_bn2d: schema, argument checks and the convolution steps every backend shares.
// Kernels for the statistics and the normalisation live in cpu/ and cuda/.
#include "conv_bn2d.h"

#include <ATen/ATen.h>
#include <limits>
#include <torch/library.h>

#include "../checks.h"

namespace tensortools::conv_bn2d {
namespace {

constexpr const char* kOp = "tensortools.fused_conv_bn2d";

// Bounds stride and padding so that the output-size arithmetic below cannot overflow.
constexpr int64_t kMaxGeometry = std::numeric_limits<int32_t>::max();

void check_pair(const char* name, at::IntArrayRef values, int64_t minimum) {
  TORCH_CHECK_VALUE(values.size() == 2, kOp, ": '", name, "' must have 2 values, got ",
                    values.size());
  for (int64_t v : values) {
    TORCH_CHECK_VALUE(v >= minimum && v <= kMaxGeometry, kOp, ": '", name, "' must be in [",
                      minimum, ", ", kMaxGeometry, "], got ", values);
  }
}

void check_affine(const std::optional<at::Tensor>& t, const char* name, const Arg& input,
                  int64_t channels) {
  if (!t.has_value() || !t->defined()) {
    return;
  }
  const Arg a{*t, name};
  checks::strided(kOp, a);
  checks::same_dtype(kOp, a, input);
  checks::same_device(kOp, a, input);
  checks::shape(kOp, a, {channels}, "out_channels");
}

}  // namespace

at::ScalarType stats_dtype(at::ScalarType input) {
  return input == at::kHalf || input == at::kBFloat16 ? at::kFloat : input;
}

void check_forward_args(const at::Tensor& input, const at::Tensor& weight,
                        const std::optional<at::Tensor>& gamma,
                        const std::optional<at::Tensor>& beta, at::IntArrayRef stride,
                        at::IntArrayRef padding, double eps,
                        c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_input{input, "input"}, a_weight{weight, "weight"};
  checks::common(kOp, {a_input, a_weight}, allowed);
  checks::dim(kOp, a_input, 4, "batch x in_channels x height x width");
  checks::dim(kOp, a_weight, 4, "out_channels x in_channels x kernel_height x kernel_width");
  checks::same_size(kOp, a_weight, 1, a_input, 1, "in_channels");
  check_affine(gamma, "gamma", a_input, weight.size(0));
  check_affine(beta, "beta", a_input, weight.size(0));
  check_pair("stride", stride, 1);
  check_pair("padding", padding, 0);
  TORCH_CHECK_VALUE(eps >= 0, kOp, ": 'eps' must be >= 0, got ", eps);
  const int64_t padded_h = input.size(2) + 2 * padding[0];
  const int64_t padded_w = input.size(3) + 2 * padding[1];
  TORCH_CHECK_VALUE(padded_h >= weight.size(2) && padded_w >= weight.size(3), kOp,
                    ": the padded input (", padded_h, " x ", padded_w,
                    ") is smaller than the kernel (", weight.size(2), " x ", weight.size(3),
                    "); 'input' has shape ", input.sizes(), ", 'weight' ", weight.sizes());
}

void check_backward_args(const at::Tensor& grad_output, const at::Tensor& input,
                         const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
                         const at::Tensor& mean, const at::Tensor& var, at::IntArrayRef stride,
                         at::IntArrayRef padding, double eps,
                         c10::ArrayRef<at::ScalarType> allowed) {
  check_forward_args(input, weight, gamma, std::nullopt, stride, padding, eps, allowed);
  const Arg a_input{input, "input"};
  const Arg a_grad{grad_output, "grad_output"}, a_mean{mean, "mean"}, a_var{var, "var"};
  for (const Arg& a : {a_grad, a_mean, a_var}) {
    checks::defined(kOp, a);
    checks::strided(kOp, a);
    checks::same_device(kOp, a, a_input);
  }
  checks::same_dtype(kOp, a_grad, a_input);
  const at::ScalarType stats = stats_dtype(input.scalar_type());
  for (const Arg& a : {a_mean, a_var}) {
    TORCH_CHECK_TYPE(a.tensor.scalar_type() == stats, kOp, ": '", a.name, "' must have dtype ",
                     stats, " for 'input' of dtype ", input.scalar_type(), ", got ",
                     a.tensor.scalar_type());
  }
  const int64_t out_channels = weight.size(0);
  const int64_t height = (input.size(2) + 2 * padding[0] - weight.size(2)) / stride[0] + 1;
  const int64_t width = (input.size(3) + 2 * padding[1] - weight.size(3)) / stride[1] + 1;
  checks::shape(kOp, a_grad, {input.size(0), out_channels, height, width},
                "the shape of the output");
  checks::shape(kOp, a_mean, {out_channels}, "out_channels");
  checks::shape(kOp, a_var, {out_channels}, "out_channels");
}

at::Tensor convolve(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                    at::IntArrayRef padding) {
  return at::convolution(input, weight, /*bias=*/std::nullopt, stride, padding,
                         /*dilation=*/{1, 1}, /*transposed=*/false, /*output_padding=*/{0, 0},
                         /*groups=*/1)
      .contiguous();
}

std::tuple<at::Tensor, at::Tensor> convolve_backward(const at::Tensor& grad_z,
                                                     const at::Tensor& input,
                                                     const at::Tensor& weight,
                                                     at::IntArrayRef stride,
                                                     at::IntArrayRef padding,
                                                     std::array<bool, 2> mask) {
  if (!mask[0] && !mask[1]) {
    return {};
  }
  auto grads = at::convolution_backward(grad_z, input, weight, /*bias_sizes=*/std::nullopt,
                                        stride, padding, /*dilation=*/{1, 1},
                                        /*transposed=*/false, /*output_padding=*/{0, 0},
                                        /*groups=*/1, {mask[0], mask[1], false});
  return {std::get<0>(grads), std::get<1>(grads)};
}

}  // namespace tensortools::conv_bn2d

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def(
      "conv_bn2d_forward(Tensor input, Tensor weight, Tensor? gamma, Tensor? beta, "
      "int[2] stride, int[2] padding, float eps) -> (Tensor output, Tensor mean, Tensor var)");
  m.def(
      "conv_bn2d_backward(Tensor grad_output, Tensor input, Tensor weight, Tensor? gamma, "
      "Tensor mean, Tensor var, int[2] stride, int[2] padding, float eps, bool[3] output_mask) "
      "-> (Tensor grad_input, Tensor grad_weight, Tensor grad_gamma, Tensor grad_beta)");
}
