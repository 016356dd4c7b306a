// conv_bn2d: schemas, argument checks, output allocation, the convolution steps every
// backend shares, the meta kernels, and the two operators composed of ATen calls
// (inference, running-statistics update). The kernels for the statistics and the
// normalisation live in cpu/ and cuda/.
#include "conv_bn2d.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <limits>

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

// The checks of every operator here: input and weight, the affine parameters, the
// geometry and eps. Returns the convolution's output shape.
c10::SymDimVector check_conv_args(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& gamma,
                                  const std::optional<at::Tensor>& beta, at::IntArrayRef stride,
                                  at::IntArrayRef padding, double eps,
                                  c10::ArrayRef<at::ScalarType> allowed) {
  const Arg a_input{input, "input"}, a_weight{weight, "weight"};
  checks::common(kOp, {a_input, a_weight}, allowed);
  checks::dim(kOp, a_input, 4, "batch x in_channels x height x width");
  checks::dim(kOp, a_weight, 4, "out_channels x in_channels x kernel_height x kernel_width");
  checks::same_size(kOp, a_weight, 1, a_input, 1, "in_channels");
  // A convolution over no channels is no convolution (torch's conv2d even returns zero
  // output channels for it); there is nothing to normalise.
  TORCH_CHECK_VALUE(input.sym_size(1) != 0, kOp,
                    ": 'input' must have at least one channel, got shape ", input.sym_sizes());
  TORCH_CHECK_VALUE(weight.sym_size(0) != 0 && weight.sym_size(2) != 0 && weight.sym_size(3) != 0,
                    kOp,
                    ": 'weight' must have at least one output channel and a kernel of at least "
                    "1 x 1, got shape ",
                    weight.sym_sizes());
  const c10::SymInt channels = weight.sym_size(0);
  checks::optional_like(kOp, gamma, "gamma", a_input, {channels}, "out_channels");
  checks::optional_like(kOp, beta, "beta", a_input, {channels}, "out_channels");
  check_pair("stride", stride, 1);
  check_pair("padding", padding, 0);
  TORCH_CHECK_VALUE(eps >= 0, kOp, ": 'eps' must be >= 0, got ", eps);
  const c10::SymInt padded_h = input.sym_size(2) + 2 * padding[0];
  const c10::SymInt padded_w = input.sym_size(3) + 2 * padding[1];
  TORCH_CHECK_VALUE(padded_h >= weight.sym_size(2) && padded_w >= weight.sym_size(3), kOp,
                    ": the padded input (", padded_h, " x ", padded_w,
                    ") is smaller than the kernel (", weight.sym_size(2), " x ", weight.sym_size(3),
                    "); 'input' has shape ", input.sym_sizes(), ", 'weight' ", weight.sym_sizes());
  return {input.sym_size(0), channels, (padded_h - weight.sym_size(2)) / stride[0] + 1,
          (padded_w - weight.sym_size(3)) / stride[1] + 1};
}

// Running statistics: 1-D of one value per output channel, of the input's dtype, on its
// device (ref: the input, or the forward's output, which has the input's dtype). With
// `stats_too`, also of the statistics' dtype: float32 running statistics beside a half
// output are what BatchNorm2d keeps under autocast, and the update adds float32 statistics.
void check_running_stats(const at::Tensor& running_mean, const at::Tensor& running_var,
                         const at::Tensor& ref, const char* ref_name, const c10::SymInt& channels,
                         bool stats_too = false) {
  const Arg a_ref{ref, ref_name};
  const at::ScalarType stats = stats_dtype(ref.scalar_type());
  for (const Arg& a : {Arg{running_mean, "running_mean"}, Arg{running_var, "running_var"}}) {
    checks::defined(kOp, a);
    checks::strided(kOp, a);
    const at::ScalarType dtype = a.tensor.scalar_type();
    TORCH_CHECK_TYPE(dtype == ref.scalar_type() || (stats_too && dtype == stats), kOp, ": '",
                     a.name, "' must have the dtype of the input (", ref.scalar_type(),
                     stats_too && stats != ref.scalar_type() ? " or Float" : "", "), got ", dtype);
    checks::same_device(kOp, a, a_ref);
    checks::shape(kOp, a, {channels}, "out_channels");
  }
}

}  // namespace

at::ScalarType stats_dtype(at::ScalarType input) {
  return input == at::kHalf || input == at::kBFloat16 ? at::kFloat : input;
}

c10::SymDimVector check_forward_args(const at::Tensor& input, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& gamma,
                                     const std::optional<at::Tensor>& beta, at::IntArrayRef stride,
                                     at::IntArrayRef padding, double eps,
                                     c10::ArrayRef<at::ScalarType> allowed) {
  c10::SymDimVector shape =
      check_conv_args(input, weight, gamma, beta, stride, padding, eps, allowed);
  // As torch.nn.BatchNorm2d: the statistics of one value are no statistics to train on.
  TORCH_CHECK_VALUE(shape[0] * shape[2] * shape[3] != 1, kOp,
                    ": training needs more than 1 value per channel, got 'input' of shape ",
                    input.sym_sizes(), " giving a 1 x 1 output for a batch of 1");
  return shape;
}

void check_backward_args(const at::Tensor& grad_output, const at::Tensor& input,
                         const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
                         const at::Tensor& mean, const at::Tensor& var, at::IntArrayRef stride,
                         at::IntArrayRef padding, double eps,
                         c10::ArrayRef<at::ScalarType> allowed) {
  const c10::SymDimVector shape =
      check_conv_args(input, weight, gamma, std::nullopt, stride, padding, eps, allowed);
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
    checks::shape(kOp, a, {shape[1]}, "out_channels");
  }
  checks::shape(kOp, a_grad, shape, "the shape of the output");
}

at::Tensor allocate_stats(const at::Tensor& input, const c10::SymInt& channels) {
  return at::empty_symint({channels}, input.options().dtype(stats_dtype(input.scalar_type())));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_forward(const at::Tensor& input,
                                                                const at::Tensor& weight,
                                                                c10::SymIntArrayRef shape) {
  return {at::empty_symint(shape, input.options()), allocate_stats(input, shape[1]),
          allocate_stats(input, shape[1])};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> allocate_backward(
    const at::Tensor& input, const at::Tensor& weight, std::array<bool, 3> output_mask) {
  const auto options = input.options();
  const c10::SymInt channels = weight.sym_size(0);
  at::Tensor grad_input, grad_weight, grad_gamma, grad_beta;
  if (output_mask[0]) {
    grad_input = at::empty_symint(input.sym_sizes(), options);
  }
  if (output_mask[1]) {
    grad_weight = at::empty_symint(weight.sym_sizes(), options);
  }
  if (output_mask[2]) {
    grad_gamma = at::empty_symint({channels}, options);
    grad_beta = at::empty_symint({channels}, options);
  }
  return {grad_input, grad_weight, grad_gamma, grad_beta};
}

at::Tensor convolve(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                    at::IntArrayRef padding, c10::SymIntArrayRef shape) {
  at::Tensor z = at::convolution(input, weight, /*bias=*/std::nullopt, stride, padding,
                                 /*dilation=*/{1, 1}, /*transposed=*/false,
                                 /*output_padding=*/{0, 0}, /*groups=*/1)
                     .contiguous();
  TORCH_INTERNAL_ASSERT(z.sym_sizes() == shape, kOp, ": the convolution gave shape ", z.sizes(),
                        " where ", shape, " was expected");
  return z;
}

std::tuple<at::Tensor, at::Tensor> convolve_backward(
    const at::Tensor& grad_z, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, std::array<bool, 2> mask) {
  if (!mask[0] && !mask[1]) {
    return {};
  }
  auto grads = at::convolution_backward(grad_z, input, weight, /*bias_sizes=*/std::nullopt, stride,
                                        padding, /*dilation=*/{1, 1},
                                        /*transposed=*/false, /*output_padding=*/{0, 0},
                                        /*groups=*/1, {mask[0], mask[1], false});
  // The convolution's own layout choices (channels_last for a channels_last input, say)
  // differ by backend; the operator's gradients are contiguous everywhere.
  const auto contiguous = [](const at::Tensor& t) { return t.defined() ? t.contiguous() : t; };
  return {contiguous(std::get<0>(grads)), contiguous(std::get<1>(grads))};
}

namespace {

// The meta kernels: the checks and output allocation of the CPU and CUDA kernels, no maths.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_bn2d_forward_meta(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
    const std::optional<at::Tensor>& beta, at::IntArrayRef stride, at::IntArrayRef padding,
    double eps) {
  const c10::SymDimVector shape = check_forward_args(input, weight, gamma, beta, stride, padding,
                                                     eps, floating_types_for(input.device()));
  return allocate_forward(input, weight, shape);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_bn2d_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& gamma, const at::Tensor& mean, const at::Tensor& var,
    at::IntArrayRef stride, at::IntArrayRef padding, double eps, std::array<bool, 3> output_mask) {
  check_backward_args(grad_output, input, weight, gamma, mean, var, stride, padding, eps,
                      floating_types_for(input.device()));
  return allocate_backward(input, weight, output_mask);
}

// Inference: batch_norm(conv2d(input, weight), running statistics) as one conv2d with the
// statistics folded into its weight and bias. Made of ATen calls, so autograd, every
// device and torch.compile (which sees the ATen calls) work through them.
at::Tensor conv_bn2d_eval(const at::Tensor& input, const at::Tensor& weight,
                          const at::Tensor& running_mean, const at::Tensor& running_var,
                          const std::optional<at::Tensor>& gamma,
                          const std::optional<at::Tensor>& beta, at::IntArrayRef stride,
                          at::IntArrayRef padding, double eps) {
  check_conv_args(input, weight, gamma, beta, stride, padding, eps,
                  floating_types_for(input.device()));
  check_running_stats(running_mean, running_var, input, "input", weight.sym_size(0));
  // The fold is computed in float for float16/bfloat16 (as batch norm computes), so the
  // folded weight and bias are rounded to their dtype once, not after every step.
  const auto up = [&](const at::Tensor& t) { return t.to(at::toOpMathType(t.scalar_type())); };
  at::Tensor scale = at::rsqrt(up(running_var) + eps);
  if (gamma.has_value() && gamma->defined()) {
    scale = scale * up(*gamma);
  }
  at::Tensor bias = -up(running_mean) * scale;
  if (beta.has_value() && beta->defined()) {
    bias = bias + up(*beta);
  }
  const at::Tensor folded = (up(weight) * scale.reshape({-1, 1, 1, 1})).to(weight.scalar_type());
  // In input's memory format on every device (ATen's own meta conv2d gives a contiguous
  // result where its CPU and CUDA kernels keep channels_last).
  return at::conv2d(input, folded, bias.to(weight.scalar_type()), stride, padding)
      .contiguous(input.suggest_memory_format());
}

// running = (1 - momentum) * running + momentum * batch statistic, as batch_norm writes it
// (lerp_ differs for an infinite running value: Inf + 0.1 * (x - Inf) is NaN). The
// unbiased variance's factor count / (count - 1) joins momentum, so a huge variance that
// fits does not overflow on the way.
// `output` is the forward's: the statistics are over its values, one channel each.
void conv_bn2d_update_stats(const at::Tensor& running_mean, const at::Tensor& running_var,
                            const at::Tensor& output, const at::Tensor& mean, const at::Tensor& var,
                            double momentum) {
  const Arg a_output{output, "output"};
  checks::defined(kOp, a_output);
  // Made of ATen calls, so every floating dtype on every device: under autocast the CPU
  // forward's output is in the autocast dtype.
  checks::dtype_in(kOp, a_output, kAllFloatingTypes);
  checks::dim(kOp, a_output, 4, "batch x out_channels x height x width");
  const c10::SymInt channels = output.sym_size(1);
  const at::ScalarType stats = stats_dtype(output.scalar_type());
  for (const Arg& a : {Arg{mean, "mean"}, Arg{var, "var"}}) {
    checks::defined(kOp, a);
    checks::strided(kOp, a);
    checks::same_device(kOp, a, a_output);
    checks::shape(kOp, a, {channels}, "out_channels");
    TORCH_CHECK_TYPE(a.tensor.scalar_type() == stats, kOp, ": '", a.name, "' must have dtype ",
                     stats, " for 'output' of dtype ", output.scalar_type(), ", got ",
                     a.tensor.scalar_type());
  }
  check_running_stats(running_mean, running_var, output, "input", channels, /*stats_too=*/true);
  for (const Arg& a : {Arg{running_mean, "running_mean"}, Arg{running_var, "running_var"}}) {
    TORCH_CHECK_VALUE(a.tensor.sym_numel() <= 1 || a.tensor.sym_stride(0) != 0, kOp, ": '", a.name,
                      "' is updated in place, so it must not be expanded (stride 0); "
                      "pass a tensor of its own, e.g. .clone()");
  }
  const c10::SymInt count = output.sym_size(0) * output.sym_size(2) * output.sym_size(3);
  TORCH_CHECK_VALUE(count != 1, kOp,
                    ": the running statistics need a batch of more than one value per channel");
  if (count == 0) {
    return;  // an empty batch has no statistics to learn from
  }
  const auto n = static_cast<double>(count.guard_int(__FILE__, __LINE__));
  const double factor = momentum * n / (n - 1);
  running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
  running_var.mul_(1 - momentum).add_(var.to(running_var.scalar_type()), factor);
}

}  // namespace
}  // namespace tensortools::conv_bn2d

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def(
      "conv_bn2d_forward(Tensor input, Tensor weight, Tensor? gamma, Tensor? beta, "
      "int[2] stride, int[2] padding, float eps) -> (Tensor output, Tensor mean, Tensor var)");
  m.def(
      "conv_bn2d_backward(Tensor grad_output, Tensor input, Tensor weight, Tensor? gamma, "
      "Tensor mean, Tensor var, int[2] stride, int[2] padding, float eps, bool[3] output_mask) "
      "-> (Tensor grad_input, Tensor grad_weight, Tensor grad_gamma, Tensor grad_beta)");
  m.def(
      "conv_bn2d_eval(Tensor input, Tensor weight, Tensor running_mean, Tensor running_var, "
      "Tensor? gamma, Tensor? beta, int[2] stride, int[2] padding, float eps) -> Tensor");
  m.def(
      "conv_bn2d_update_stats(Tensor(a!) running_mean, Tensor(b!) running_var, Tensor output, "
      "Tensor mean, Tensor var, float momentum) -> ()");
}

TORCH_LIBRARY_IMPL(tensortools, Meta, m) {
  m.impl("conv_bn2d_forward", &tensortools::conv_bn2d::conv_bn2d_forward_meta);
  m.impl("conv_bn2d_backward", &tensortools::conv_bn2d::conv_bn2d_backward_meta);
}

TORCH_LIBRARY_IMPL(tensortools, CompositeImplicitAutograd, m) {
  m.impl("conv_bn2d_eval", &tensortools::conv_bn2d::conv_bn2d_eval);
}

TORCH_LIBRARY_IMPL(tensortools, CompositeExplicitAutograd, m) {
  m.impl("conv_bn2d_update_stats", &tensortools::conv_bn2d::conv_bn2d_update_stats);
}
