// graph_conv on CUDA: the two ATen matrix products of graph_conv.cpp (cuBLAS, cuSPARSE for
// a sparse adj), on the device of x.
#include <torch/library.h>

#include "../../checks.h"
#include "../graph_conv.h"
#include "launch.cuh"

namespace tensortools::graph_conv {
namespace {

at::Tensor graph_conv_cuda(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  return graph_conv(adj, x, weight, bias, kCudaFloatingTypes);
}

}  // namespace
}  // namespace tensortools::graph_conv

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cuda);
}
TORCH_LIBRARY_IMPL(tensortools, SparseCUDA, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cuda);
}
TORCH_LIBRARY_IMPL(tensortools, SparseCsrCUDA, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv_cuda);
}
