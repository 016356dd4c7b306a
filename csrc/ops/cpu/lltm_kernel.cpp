// LLTM on the CPU: one matrix product through ATen, then all pointwise work in a single
// at::parallel_for pass over the batch rows (forward and backward alike).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

#include "../../checks.h"
#include "../lltm.h"
#include "../lltm_math.h"

namespace tensortools::lltm {
namespace {

// Rows per task: enough elements that a task outweighs the cost of waking a thread.
int64_t grain_rows(int64_t state_size) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, state_size));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_forward_cpu(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell_) {
  check_forward_args(input, weights, bias, old_h, old_cell_, kCpuFloatingTypes);
  const int64_t B = input.size(0), S = old_h.size(1);

  // cat and addmm accept any strides and produce contiguous results; only old_cell is
  // read directly by the pointwise pass.
  at::Tensor X = at::cat({old_h, input}, /*dim=*/1);
  at::Tensor gates = at::addmm(bias, X, weights.t());  // B × 3S, pre-activation
  const at::Tensor old_cell = old_cell_.contiguous();
  at::Tensor new_h = at::empty({B, S}, old_cell.options());
  at::Tensor new_cell = at::empty({B, S}, old_cell.options());

  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_forward_cpu", [&] {
    scalar_t* g = gates.data_ptr<scalar_t>();
    const scalar_t* oc = old_cell.const_data_ptr<scalar_t>();
    scalar_t* nc = new_cell.data_ptr<scalar_t>();
    scalar_t* nh = new_h.data_ptr<scalar_t>();
    at::parallel_for(0, B, grain_rows(S), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        scalar_t* gi = g + b * 3 * S;
        scalar_t* go = gi + S;
        scalar_t* gc = go + S;
        const scalar_t* ocb = oc + b * S;
        scalar_t* ncb = nc + b * S;
        scalar_t* nhb = nh + b * S;
        for (int64_t j = 0; j < S; ++j) {
          forward_element<scalar_t>(gi[j], go[j], gc[j], ocb[j], ncb[j], nhb[j]);
        }
      }
    });
  });
  return {new_h, new_cell, gates, X};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lltm_backward_cpu(
    const at::Tensor& grad_h_, const at::Tensor& grad_cell_, const at::Tensor& new_cell_,
    const at::Tensor& gates_, const at::Tensor& X, const at::Tensor& weights) {
  check_backward_args(grad_h_, grad_cell_, new_cell_, gates_, X, weights, kCpuFloatingTypes);
  const int64_t B = new_cell_.size(0), S = new_cell_.size(1), F = X.size(1) - S;

  // Gradients arriving from reductions are often expanded (stride 0): copy once here.
  const at::Tensor grad_h = grad_h_.contiguous();
  const at::Tensor grad_cell = grad_cell_.contiguous();
  const at::Tensor new_cell = new_cell_.contiguous();
  const at::Tensor gates = gates_.contiguous();
  at::Tensor d_gates = at::empty({B, 3 * S}, gates.options());
  at::Tensor d_old_cell = at::empty({B, S}, gates.options());

  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_backward_cpu", [&] {
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* gcell = grad_cell.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.data_ptr<scalar_t>();
    scalar_t* doc = d_old_cell.data_ptr<scalar_t>();
    at::parallel_for(0, B, grain_rows(S), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const scalar_t* gi = g + b * 3 * S;
        scalar_t* di = dg + b * 3 * S;
        const int64_t r = b * S;
        for (int64_t j = 0; j < S; ++j) {
          backward_element<scalar_t>(gi[j], gi[S + j], gi[2 * S + j], nc[r + j], gh[r + j],
                                     gcell[r + j], di[j], di[S + j], di[2 * S + j],
                                     doc[r + j]);
        }
      }
    });
  });

  // X = [old_h | input], so d_X = d_gates @ weights splits by the columns of weights;
  // two products into fresh tensors avoid slicing (and copying) one d_X.
  at::Tensor d_weights = at::mm(d_gates.t(), X);
  at::Tensor d_bias = d_gates.sum(/*dim=*/0);
  at::Tensor d_old_h = at::mm(d_gates, weights.narrow(1, 0, S));
  at::Tensor d_input = at::mm(d_gates, weights.narrow(1, S, F));
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_cpu);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_cpu);
}
