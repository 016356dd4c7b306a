// graph_conv: schema, argument checks and its one kernel. The kernel is two ATen matrix
// products (sparse-aware for adj, cuBLAS/cuSPARSE on CUDA) in the cheaper order, so one
// registration (CompositeExplicitAutograd: every backend, sparse layouts and meta) serves
// every device; its autograd formula is registered in Python (tensortools/ops.py).
#include "graph_conv.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "../checks.h"

namespace tensortools::graph_conv {
namespace {

constexpr const char* kOp = "tensortools.graph_conv";

// A sparse adj's invariants, as torch checks them when a sparse tensor is built with
// check_invariants=True: O(nnz), small beside the products.
void check_sparse_indices(const at::Tensor& adj) {
  if (adj.layout() == at::kStrided || adj.is_meta()) {
    return;  // meta tensors have no indices to read
  }
  try {
    if (adj.layout() == at::kSparse) {
      at::_validate_sparse_coo_tensor_args(adj._indices(), adj._values(), adj.sizes());
    } else {
      at::_validate_sparse_csr_tensor_args(adj.crow_indices(), adj.col_indices(), adj.values(),
                                           adj.sizes());
    }
  } catch (const c10::Error& err) {
    TORCH_CHECK_VALUE(false, kOp, ": 'adj' is not a valid sparse ",
                      adj.layout() == at::kSparse ? "COO" : "CSR",
                      " tensor: ", err.what_without_backtrace());
  }
}

}  // namespace

void check_args(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                const std::optional<at::Tensor>& bias) {
  const Arg a_adj{adj, "adj"}, a_x{x, "x"}, a_weight{weight, "weight"};
  checks::common(kOp, {a_x, a_weight}, floating_types_for(x.device()));
  checks::defined(kOp, a_adj);
  TORCH_CHECK_TYPE(
      adj.layout() == at::kStrided || adj.layout() == at::kSparse || adj.layout() == at::kSparseCsr,
      kOp, ": 'adj' must be dense, sparse COO or sparse CSR, got layout ", adj.layout());
  // A hybrid sparse tensor keeps a dense block per stored index; ATen's sparse product
  // takes a matrix of scalars only, so such an adj would fail inside it, unnamed.
  TORCH_CHECK_TYPE(
      adj.layout() == at::kStrided || (adj.sparse_dim() == 2 && adj.dense_dim() == 0), kOp,
      ": a sparse 'adj' must have 2 sparse dimensions and no dense ones (not "
      "hybrid), got sparse_dim ",
      adj.sparse_dim(), " and dense_dim ", adj.dense_dim(), " for shape ", adj.sym_sizes());
  checks::same_dtype(kOp, a_adj, a_x);
  checks::same_device(kOp, a_adj, a_x);
  // ATen's sparse COO product has no Half or BFloat16 kernel on CUDA (its error names no
  // argument, and an empty product skips it and returns): sparse takes float32/float64.
  TORCH_CHECK_TYPE(adj.layout() == at::kStrided || (at::isFloatingType(adj.scalar_type()) &&
                                                    c10::elementSize(adj.scalar_type()) >= 4),
                   kOp, ": a sparse 'adj' must have dtype Float or Double, got ", adj.scalar_type(),
                   " (dense 'adj' takes ", adj.scalar_type(), " on this device)");
  checks::dim(kOp, a_x, 2, "nodes x in_features");
  checks::dim(kOp, a_weight, 2, "in_features x out_features");
  const c10::SymInt N = x.sym_size(0);
  checks::shape(kOp, a_adj, {N, N}, "nodes x nodes");
  checks::same_size(kOp, a_weight, 0, a_x, 1, "in_features");
  checks::optional_like(kOp, bias, "bias", a_x, {weight.sym_size(1)}, "out_features");
  check_sparse_indices(adj);
}

namespace {

at::Tensor graph_conv(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias) {
  check_args(adj, x, weight, bias);
  const bool has_bias = bias.has_value() && bias->defined();
  if (adj_first(x.sym_size(1), weight.sym_size(1))) {
    const at::Tensor ax = at::mm(adj, x);  // sparse @ dense gives dense
    return has_bias ? at::addmm(*bias, ax, weight) : at::mm(ax, weight);
  }
  at::Tensor out = at::mm(adj, at::mm(x, weight));
  return has_bias ? out.add_(*bias) : out;
}

}  // namespace
}  // namespace tensortools::graph_conv

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("graph_conv(Tensor adj, Tensor x, Tensor weight, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tensortools, CompositeExplicitAutograd, m) {
  m.impl("graph_conv", &tensortools::graph_conv::graph_conv);
}
