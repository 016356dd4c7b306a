// graph_conv: schema and argument checks. Kernels live in cpu/.
#include "graph_conv.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "../checks.h"

namespace tensortools::graph_conv {

void check_args(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                const std::optional<at::Tensor>& bias, c10::ArrayRef<at::ScalarType> allowed) {
  constexpr const char* op = "tensortools.graph_conv";
  const Arg a_adj{adj, "adj"}, a_x{x, "x"}, a_weight{weight, "weight"};
  checks::common(op, {a_x, a_weight}, allowed);
  checks::defined(op, a_adj);
  TORCH_CHECK_TYPE(adj.layout() == at::kStrided || adj.layout() == at::kSparse ||
                       adj.layout() == at::kSparseCsr,
                   op, ": 'adj' must be dense, sparse COO or sparse CSR, got layout ",
                   adj.layout());
  checks::same_dtype(op, a_adj, a_x);
  checks::same_device(op, a_adj, a_x);
  checks::dim(op, a_x, 2, "nodes x in_features");
  checks::dim(op, a_weight, 2, "in_features x out_features");
  const int64_t N = x.size(0), F_in = x.size(1), F_out = weight.size(1);
  checks::shape(op, a_adj, {N, N}, "nodes x nodes");
  checks::same_size(op, a_weight, 0, a_x, 1, "in_features");
  if (bias.has_value() && bias->defined()) {
    const Arg a_bias{*bias, "bias"};
    checks::strided(op, a_bias);
    checks::same_dtype(op, a_bias, a_x);
    checks::same_device(op, a_bias, a_x);
    checks::shape(op, a_bias, {F_out}, "out_features");
  }
  (void)F_in;
}

at::Tensor graph_conv(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias,
                      c10::ArrayRef<at::ScalarType> allowed) {
  check_args(adj, x, weight, bias, allowed);
  const bool has_bias = bias.has_value() && bias->defined();
  if (adj_first(x.size(1), weight.size(1))) {
    const at::Tensor ax = at::mm(adj, x);  // sparse @ dense gives dense
    return has_bias ? at::addmm(*bias, ax, weight) : at::mm(ax, weight);
  }
  at::Tensor out = at::mm(adj, at::mm(x, weight));
  return has_bias ? out.add_(*bias) : out;
}

}  // namespace tensortools::graph_conv

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("graph_conv(Tensor adj, Tensor x, Tensor weight, Tensor? bias) -> Tensor");
}
