// graph_conv on the CPU: the two ATen matrix products of graph_conv.cpp.
#include <torch/library.h>

#include "../../checks.h"
#include "../graph_conv.h"

namespace tensortools::graph_conv {
namespace {

at::Tensor graph_conv_cpu(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  return graph_conv(adj, x, weight, bias, kCpuFloatingTypes);
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
