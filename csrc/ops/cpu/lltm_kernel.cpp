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
#include "parallel.h"
#include "vec_math.h"

// The float32 row loops are compiled once per x86-64 level and picked at load time for the
// CPU at hand, so they vectorise as wide as it allows and still run on any x86-64.
#if defined(__x86_64__) && defined(__GNUC__)
#define TENSORTOOLS_TARGET_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TENSORTOOLS_TARGET_CLONES
#endif

namespace tensortools::lltm {
namespace {

// Rows [b0, b1) of the forward pass; `gates` (B×3S, pre-activation) is overwritten with
// the activated gates.
template <typename T, typename M>
TENSORTOOLS_ALWAYS_INLINE void forward_rows(T* __restrict gates, const T* __restrict old_cell,
                                            T* __restrict new_cell, T* __restrict new_h, int64_t b0,
                                            int64_t b1, int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    T* gi = gates + b * 3 * S;
    T* go = gi + S;
    T* gc = go + S;
    const T* ocb = old_cell + b * S;
    T* ncb = new_cell + b * S;
    T* nhb = new_h + b * S;
#pragma omp simd
    for (int64_t j = 0; j < S; ++j) {
      forward_element<T, M>(gi[j], go[j], gc[j], ocb[j], ncb[j], nhb[j]);
    }
  }
}

// Rows [b0, b1) of the backward pass.
template <typename T, typename M>
TENSORTOOLS_ALWAYS_INLINE void backward_rows(const T* __restrict gates,
                                             const T* __restrict new_cell,
                                             const T* __restrict grad_h,
                                             const T* __restrict grad_cell, T* __restrict d_gates,
                                             T* __restrict d_old_cell, int64_t b0, int64_t b1,
                                             int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    const T* gi = gates + b * 3 * S;
    T* di = d_gates + b * 3 * S;
    const int64_t r = b * S;
#pragma omp simd
    for (int64_t j = 0; j < S; ++j) {
      backward_element<T, M>(gi[j], gi[S + j], gi[2 * S + j], new_cell[r + j], grad_h[r + j],
                             grad_cell[r + j], di[j], di[S + j], di[2 * S + j], d_old_cell[r + j]);
    }
  }
}

// float32 takes the vectorisable maths; float64 keeps the C library's.
TENSORTOOLS_TARGET_CLONES void forward_pass(float* g, const float* oc, float* nc, float* nh,
                                            int64_t b0, int64_t b1, int64_t S) {
  forward_rows<float, cpu::FastMathF32>(g, oc, nc, nh, b0, b1, S);
}

void forward_pass(double* g, const double* oc, double* nc, double* nh, int64_t b0, int64_t b1,
                  int64_t S) {
  forward_rows<double, StdMath>(g, oc, nc, nh, b0, b1, S);
}

TENSORTOOLS_TARGET_CLONES void backward_pass(const float* g, const float* nc, const float* gh,
                                             const float* gcell, float* dg, float* doc, int64_t b0,
                                             int64_t b1, int64_t S) {
  backward_rows<float, cpu::FastMathF32>(g, nc, gh, gcell, dg, doc, b0, b1, S);
}

void backward_pass(const double* g, const double* nc, const double* gh, const double* gcell,
                   double* dg, double* doc, int64_t b0, int64_t b1, int64_t S) {
  backward_rows<double, StdMath>(g, nc, gh, gcell, dg, doc, b0, b1, S);
}

ForwardOutputs lltm_forward_cpu(const at::Tensor& input, const at::Tensor& weights,
                                const at::Tensor& bias, const at::Tensor& old_h,
                                const at::Tensor& old_cell_) {
  check_forward_args(input, weights, bias, old_h, old_cell_, kCpuFloatingTypes);
  const int64_t B = input.size(0), S = old_h.size(1);

  // Named references, not structured bindings: C++17 lambdas cannot capture those.
  ForwardBuffers buf = forward_buffers(input, weights, bias, old_h, old_cell_);
  const at::Tensor &X = buf.X, &gates = buf.gates, &old_cell = buf.old_cell;
  const at::Tensor &new_h = buf.new_h, &new_cell = buf.new_cell;

  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_forward_cpu", [&] {
    scalar_t* g = gates.data_ptr<scalar_t>();
    const scalar_t* oc = old_cell.const_data_ptr<scalar_t>();
    scalar_t* nc = new_cell.data_ptr<scalar_t>();
    scalar_t* nh = new_h.data_ptr<scalar_t>();
    at::parallel_for(0, B, cpu::grain_for(S), [&](int64_t begin, int64_t end) {
      forward_pass(g, oc, nc, nh, begin, end, S);
    });
  });
  return {new_h, new_cell, gates, X};
}

BackwardOutputs lltm_backward_cpu(const at::Tensor& grad_h_, const at::Tensor& grad_cell_,
                                  const at::Tensor& new_cell_, const at::Tensor& gates_,
                                  const at::Tensor& X, const at::Tensor& weights) {
  check_backward_args(grad_h_, grad_cell_, new_cell_, gates_, X, weights, kCpuFloatingTypes);
  const int64_t B = new_cell_.size(0), S = new_cell_.size(1);

  BackwardBuffers buf = backward_buffers(grad_h_, grad_cell_, new_cell_, gates_, X);
  const at::Tensor &grad_h = buf.grad_h, &grad_cell = buf.grad_cell;
  const at::Tensor &new_cell = buf.new_cell, &gates = buf.gates;
  const at::Tensor &d_gates = buf.d_gates, &d_old_cell = buf.d_old_cell;

  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_backward_cpu", [&] {
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* gcell = grad_cell.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.data_ptr<scalar_t>();
    scalar_t* doc = d_old_cell.data_ptr<scalar_t>();
    at::parallel_for(0, B, cpu::grain_for(S), [&](int64_t begin, int64_t end) {
      backward_pass(g, nc, gh, gcell, dg, doc, begin, end, S);
    });
  });

  backward_products(buf, X, weights);
  return buf.outputs();
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_cpu);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_cpu);
}
