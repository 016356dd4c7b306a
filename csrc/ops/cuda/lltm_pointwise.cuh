// The LLTM cell's pointwise passes on CUDA (lltm_kernel.cu), one kernel launch each: the
// cell operators run them beside their products, the sequence operator once per step where
// its persistent kernels do not apply.
#pragma once

#include <ATen/core/Tensor.h>

namespace tensortools::lltm {

// Forward over B×S (2-D, contiguous; see ForwardPointwise in lltm_sequence.h): `gates`
// (B×3S) holds the pre-activation gates on entry and the activated ones on exit.
void forward_pointwise(const at::Tensor& gates, const at::Tensor& old_cell,
                       const at::Tensor& new_cell, const at::Tensor& new_h);
// Backward over B×S (see BackwardPointwise): writes d_gates (B×3S) and d_old_cell.
void backward_pointwise(const at::Tensor& gates, const at::Tensor& new_cell,
                        const at::Tensor& grad_h, const at::Tensor& grad_cell,
                        const at::Tensor& d_gates, const at::Tensor& d_old_cell);

}  // namespace tensortools::lltm
