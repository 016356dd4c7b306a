// graph_conv under torch.autocast, as reference.graph_conv runs there: the two matrix
// products give a result in the autocast dtype (autocast casts matmul's arguments), then
// `+ bias` adds bias as it is, so the result has the dtype torch's type promotion gives
// (float32 for a float32 bias, the autocast dtype for none).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../graph_conv.h"
#include "autocast.h"

namespace tensortools::graph_conv {
namespace {

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const std::optional<at::Tensor>&);

template <c10::DeviceType device>
at::Tensor graph_conv_autocast(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias) {
  const autocast::Off<device> no_autocast;
  const at::ScalarType lower = at::autocast::get_autocast_dtype(device);
  // The products run in the autocast dtype where this device's kernels take it (CUDA)
  // and adj is dense; otherwise in float32, rounded after (the CPU kernels take float32
  // and float64, and sparse products in the half types are not on every backend).
  const bool in_lower = checks::dtype_among(lower, floating_types_for(c10::Device(device))) &&
                        adj.layout() == at::kStrided;
  const at::ScalarType compute = in_lower ? lower : at::kFloat;
  const at::Tensor adj_ = autocast::cast<device>(compute, adj);
  const at::Tensor x_ = autocast::cast<device>(compute, x);
  const at::Tensor weight_ = autocast::cast<device>(compute, weight);
  // The bias is checked as the products see it (cast alike), and added as it came.
  check_args(adj_, x_, weight_, autocast::cast<device>(compute, bias));
  static const auto graph_conv = autocast::op<Signature>("tensortools::graph_conv");
  at::Tensor out = graph_conv.call(adj_, x_, weight_, std::nullopt);
  if (out.scalar_type() == compute && compute != lower) {
    out = out.to(lower);  // float64 arguments, which autocast leaves alone, stay float64
  }
  return bias.has_value() && bias->defined() ? out + *bias : out;
}

}  // namespace
}  // namespace tensortools::graph_conv

TORCH_LIBRARY_IMPL(tensortools, AutocastCPU, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(tensortools, AutocastCUDA, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_autocast<c10::DeviceType::CUDA>);
}
