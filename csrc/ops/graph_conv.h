// graph_conv(adj, x, weight, bias) = adj @ x @ weight + bias. adj is N×N, dense or sparse
// (COO or CSR); x N×F_in; weight F_in×F_out; bias F_out or None.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <optional>

namespace tensortools::graph_conv {

// Validates the arguments, including a sparse adj's indices (in range, CSR row pointers
// monotone from 0 to nnz): kernels read sparse indices without bounds checks, so a
// malformed adj must never reach them.
void check_args(const at::Tensor& adj, const at::Tensor& x, const at::Tensor& weight,
                const std::optional<at::Tensor>& bias);

// True when (adj @ x) @ weight costs no more than adj @ (x @ weight): with E the nonzeros
// of adj (N² when dense), E·F_in + N·F_in·F_out against N·F_in·F_out + E·F_out.
inline bool adj_first(const c10::SymInt& in_features, const c10::SymInt& out_features) {
  return in_features <= out_features;
}

}  // namespace tensortools::graph_conv
