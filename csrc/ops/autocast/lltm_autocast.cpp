// The LLTM cell and sequence under torch.autocast, as torch's recurrent layers run there
// (nn.LSTM's oneDNN layer on the CPU, its cuDNN one on CUDA, and the CUDA cells): every
// floating argument in the autocast dtype (float64 ones stay float64), and every output
// in it, the new state included. The kernels then compute their pointwise maths in float32
// and their products in the autocast dtype, on both devices.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "autocast.h"

namespace tensortools::lltm {
namespace {

using Step = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
using Sequence = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
using Inference = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);

// Calls `name` with its five arguments cast, below autocast.
template <c10::DeviceType device, typename Signature>
auto call_cast(const char* name, const at::Tensor& input, const at::Tensor& weights,
               const at::Tensor& bias, const at::Tensor& h, const at::Tensor& cell) {
  const autocast::Off<device> no_autocast;
  const at::ScalarType lower = at::autocast::get_autocast_dtype(device);
  const auto op = autocast::op<Signature>(name);
  return op.call(autocast::cast<device>(lower, input), autocast::cast<device>(lower, weights),
                 autocast::cast<device>(lower, bias), autocast::cast<device>(lower, h),
                 autocast::cast<device>(lower, cell));
}

template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward_autocast(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  return call_cast<device, Step>("tensortools::lltm_forward", input, weights, bias, old_h,
                                 old_cell);
}

template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
lltm_sequence_forward_autocast(const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0) {
  return call_cast<device, Sequence>("tensortools::lltm_sequence_forward", input, weights, bias, h0,
                                     c0);
}

template <c10::DeviceType device>
std::tuple<at::Tensor, at::Tensor, at::Tensor> lltm_sequence_inference_autocast(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& h0, const at::Tensor& c0) {
  return call_cast<device, Inference>("tensortools::lltm_sequence_inference", input, weights, bias,
                                      h0, c0);
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, AutocastCPU, m) {
  using c10::DeviceType;
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_autocast<DeviceType::CPU>);
  m.impl("lltm_sequence_forward",
         &tensortools::lltm::lltm_sequence_forward_autocast<DeviceType::CPU>);
  m.impl("lltm_sequence_inference",
         &tensortools::lltm::lltm_sequence_inference_autocast<DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(tensortools, AutocastCUDA, m) {
  using c10::DeviceType;
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_autocast<DeviceType::CUDA>);
  m.impl("lltm_sequence_forward",
         &tensortools::lltm::lltm_sequence_forward_autocast<DeviceType::CUDA>);
  m.impl("lltm_sequence_inference",
         &tensortools::lltm::lltm_sequence_inference_autocast<DeviceType::CUDA>);
}
