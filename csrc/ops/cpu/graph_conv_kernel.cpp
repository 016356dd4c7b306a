// graph_conv on the CPU: two matrix products through ATen (sparse-aware for adj) in the
// cheaper order, the bias folded into the last one where it is dense.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../graph_conv.h"

namespace tensortools::graph_conv {
namespace {

at::Tensor graph_conv_cpu(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  check_args(adj, x, weight, bias, kCpuFloatingTypes);
  const bool has_bias = bias.has_value() && bias->defined();
  if (adj_first(x.size(1), weight.size(1))) {
    const at::Tensor ax = at::mm(adj, x);  // sparse @ dense gives dense
    return has_bias ? at::addmm(*bias, ax, weight) : at::mm(ax, weight);
  }
  at::Tensor out = at::mm(adj, at::mm(x, weight));
  return has_bias ? out.add_(*bias) : out;
}

}  // namespace
}  // namespace tensortools::graph_conv

// One kernel serves every layout of adj: at::mm handles sparse @ dense itself.
TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cpu);
}
TORCH_LIBRARY_IMPL(tensortools, SparseCPU, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cpu);
}
TORCH_LIBRARY_IMPL(tensortools, SparseCsrCPU, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cpu);
}
