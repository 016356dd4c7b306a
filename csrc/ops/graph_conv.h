// graph_conv(adj, x, weight, bias) = adj @ x @ weight + bias, multiplying in the cheaper
// order for the shapes. adj is N×N, dense or sparse (COO or CSR); x N×F_in; weight
// F_in×F_out; bias F_out or None.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <optional>

namespace tensortools::graph_conv {

void check_args(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                const std::optional<at::Tensor>& bias, c10::ArrayRef<at::ScalarType> allowed);

// True when (adj @ x) @ weight costs no more than adj @ (x @ weight): with E the nonzeros
// of adj (N² when dense), E·F_in + N·F_in·F_out against N·F_in·F_out + E·F_out.
// adj @ x @ weight + bias: two matrix products through ATen (sparse-aware for adj) in the
// cheaper order, the bias folded into the last one where it is dense. Every backend's
// kernel is this, with its dtypes.
at::Tensor graph_conv(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias,
                      c10::ArrayRef<at::ScalarType> allowed);

inline bool adj_first(int64_t in_features, int64_t out_features) {
  return in_features <= out_features;
}

}  // namespace tensortools::graph_conv
