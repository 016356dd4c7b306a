// The LLTM cell's plain path in C++ autograd (see lltm_autograd.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tensortools::lltm {

// (new_h, new_cell, gates, X) of lltm_forward, with one C++ autograd node over the forward
// and backward kernels (gates and X non-differentiable). For calls outside torch.func
// transforms, forward-mode AD, autocast and torch.compile (tensortools/ops/_autograd.py).
std::vector<at::Tensor> lltm_cell_autograd(const at::Tensor& input, const at::Tensor& weights,
                                           const at::Tensor& bias, const at::Tensor& old_h,
                                           const at::Tensor& old_cell);

}  // namespace tensortools::lltm
