// The fused conv-bn's training forward under torch.autocast, as
// Conv2d(bias=False) + BatchNorm2d run there: the convolution's arguments in the autocast
// dtype, the normalisation computing its statistics in float32, the result in the autocast
// dtype. Where this device's kernels take the autocast dtype (CUDA) they compute in it,
// with gamma and beta cast alike; where they do not (the CPU kernels take float32 and
// float64), they compute in float32 and the result is rounded to the autocast dtype: no
// less accurate than the pair, and of its dtype. Inference (conv_bn2d_eval) needs no kernel
// here: it is one conv2d, which autocast casts itself.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../conv_bn2d.h"
#include "autocast.h"

namespace tensortools::conv_bn2d {
namespace {

using Forward = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                               const std::optional<at::Tensor>&,
                                                               const std::optional<at::Tensor>&,
                                                               at::IntArrayRef, at::IntArrayRef,
                                                               double);

template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_bn2d_forward_autocast(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
    const std::optional<at::Tensor>& beta, at::IntArrayRef stride, at::IntArrayRef padding,
    double eps) {
  const autocast::Off<device> no_autocast;
  static const auto forward = autocast::op<Forward>("tensortools::conv_bn2d_forward");
  // A float64 input (or none at all) stays as it is under autocast, as conv2d's does.
  if (!input.defined() || !at::autocast::is_eligible(input, device)) {
    return forward.call(input, weight, gamma, beta, stride, padding, eps);
  }
  const at::ScalarType lower = at::autocast::get_autocast_dtype(device);
  const at::ScalarType compute =
      checks::dtype_among(lower, floating_types_for(c10::Device(device))) ? lower : at::kFloat;
  auto [out, mean, var] =
      forward.call(autocast::cast<device>(compute, input), autocast::cast<device>(compute, weight),
                   autocast::cast<device>(compute, gamma), autocast::cast<device>(compute, beta),
                   stride, padding, eps);
  return {out.to(lower), mean, var};
}

}  // namespace
}  // namespace tensortools::conv_bn2d

TORCH_LIBRARY_IMPL(tensortools, AutocastCPU, m) {
  m.impl("conv_bn2d_forward",
         &tensortools::conv_bn2d::conv_bn2d_forward_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(tensortools, AutocastCUDA, m) {
  m.impl("conv_bn2d_forward",
         &tensortools::conv_bn2d::conv_bn2d_forward_autocast<c10::DeviceType::CUDA>);
}
