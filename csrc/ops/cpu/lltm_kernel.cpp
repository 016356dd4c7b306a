// LLTM on the CPU: one matrix product through ATen, then all pointwise work in a single
// at::parallel_for pass over the batch rows (forward and backward alike). The sequence
// operator runs the same pointwise passes once per step (lltm_sequence.cpp has the loop).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

#include "../../checks.h"
#include "../lltm.h"
#include "../lltm_math.h"
#include "../lltm_sequence.h"
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

// What one element of a pointwise pass costs against the plain arithmetic that
// at::internal::GRAIN_SIZE is tuned for (four transcendental functions and their
// products): tasks of about 512 elements, so that two threads share a pass of 16x128
// (measured: 61 -> 45 us at that size, 160 -> 96 us at 64x128).
constexpr int64_t kElementCost = 64;

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

// float16 and bfloat16 are stored in their dtype and computed in float32 (as the CUDA
// kernels do, and as torch's CPU LSTM does for them): each element is read, computed and
// rounded once.
template <typename T>
void forward_pass_low(T* g, const T* oc, T* nc, T* nh, int64_t b0, int64_t b1, int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    T* gi = g + b * 3 * S;
    for (int64_t j = 0; j < S; ++j) {
      float i = gi[j], o = gi[S + j], c = gi[2 * S + j], new_cell, new_h;
      forward_element<float, cpu::FastMathF32>(i, o, c, static_cast<float>(oc[b * S + j]), new_cell,
                                               new_h);
      gi[j] = i;
      gi[S + j] = o;
      gi[2 * S + j] = c;
      nc[b * S + j] = new_cell;
      nh[b * S + j] = new_h;
    }
  }
}

template <typename T>
void backward_pass_low(const T* g, const T* nc, const T* gh, const T* gcell, T* dg, T* doc,
                       int64_t b0, int64_t b1, int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    const T* gi = g + b * 3 * S;
    T* di = dg + b * 3 * S;
    const int64_t r = b * S;
    for (int64_t j = 0; j < S; ++j) {
      float d_i, d_o, d_c, d_old_cell;
      backward_element<float, cpu::FastMathF32>(gi[j], gi[S + j], gi[2 * S + j], nc[r + j],
                                                gh[r + j], gcell[r + j], d_i, d_o, d_c, d_old_cell);
      di[j] = d_i;
      di[S + j] = d_o;
      di[2 * S + j] = d_c;
      doc[r + j] = d_old_cell;
    }
  }
}

void forward_pass(at::Half* g, const at::Half* oc, at::Half* nc, at::Half* nh, int64_t b0,
                  int64_t b1, int64_t S) {
  forward_pass_low(g, oc, nc, nh, b0, b1, S);
}

void forward_pass(at::BFloat16* g, const at::BFloat16* oc, at::BFloat16* nc, at::BFloat16* nh,
                  int64_t b0, int64_t b1, int64_t S) {
  forward_pass_low(g, oc, nc, nh, b0, b1, S);
}

void backward_pass(const at::Half* g, const at::Half* nc, const at::Half* gh, const at::Half* gcell,
                   at::Half* dg, at::Half* doc, int64_t b0, int64_t b1, int64_t S) {
  backward_pass_low(g, nc, gh, gcell, dg, doc, b0, b1, S);
}

void backward_pass(const at::BFloat16* g, const at::BFloat16* nc, const at::BFloat16* gh,
                   const at::BFloat16* gcell, at::BFloat16* dg, at::BFloat16* doc, int64_t b0,
                   int64_t b1, int64_t S) {
  backward_pass_low(g, nc, gh, gcell, dg, doc, b0, b1, S);
}

// One pointwise pass of the forward (2-D contiguous tensors, see ForwardPointwise).
void forward_pointwise(const at::Tensor& gates, const at::Tensor& old_cell,
                       const at::Tensor& new_cell, const at::Tensor& new_h) {
  const int64_t B = gates.size(0), S = new_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_forward_cpu", [&] {
        scalar_t* g = gates.data_ptr<scalar_t>();
        const scalar_t* oc = old_cell.const_data_ptr<scalar_t>();
        scalar_t* nc = new_cell.data_ptr<scalar_t>();
        scalar_t* nh = new_h.data_ptr<scalar_t>();
        at::parallel_for(0, B, cpu::grain_for(S * kElementCost), [&](int64_t begin, int64_t end) {
          forward_pass(g, oc, nc, nh, begin, end, S);
        });
      });
}

// One pointwise pass of the backward (2-D contiguous tensors, see BackwardPointwise).
void backward_pointwise(const at::Tensor& gates, const at::Tensor& new_cell,
                        const at::Tensor& grad_h, const at::Tensor& grad_cell,
                        const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_backward_cpu", [&] {
        const scalar_t* g = gates.const_data_ptr<scalar_t>();
        const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
        const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
        const scalar_t* gcell = grad_cell.const_data_ptr<scalar_t>();
        scalar_t* dg = d_gates.data_ptr<scalar_t>();
        scalar_t* doc = d_old_cell.data_ptr<scalar_t>();
        at::parallel_for(0, B, cpu::grain_for(S * kElementCost), [&](int64_t begin, int64_t end) {
          backward_pass(g, nc, gh, gcell, dg, doc, begin, end, S);
        });
      });
}

ForwardOutputs lltm_forward_cpu(const at::Tensor& input, const at::Tensor& weights,
                                const at::Tensor& bias, const at::Tensor& old_h,
                                const at::Tensor& old_cell) {
  check_forward_args(input, weights, bias, old_h, old_cell, kAllFloatingTypes);
  ForwardBuffers buf = forward_buffers(input, weights, bias, old_h, old_cell);
  forward_pointwise(buf.gates, buf.old_cell, buf.new_cell, buf.new_h);
  return {buf.new_h, buf.new_cell, buf.gates, buf.X};
}

BackwardOutputs lltm_backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                  const at::Tensor& new_cell, const at::Tensor& gates,
                                  const at::Tensor& X, const at::Tensor& weights) {
  check_backward_args(grad_h, grad_cell, new_cell, gates, X, weights, kAllFloatingTypes);
  BackwardBuffers buf = backward_buffers(grad_h, grad_cell, new_cell, gates, X);
  backward_pointwise(buf.gates, buf.new_cell, buf.grad_h, buf.grad_cell, buf.d_gates,
                     buf.d_old_cell);
  backward_products(buf, X, weights);
  return buf.outputs();
}

GatesForwardOutputs lltm_gates_forward_cpu(const at::Tensor& gates, const at::Tensor& old_cell) {
  check_gates_forward_args(gates, old_cell, kAllFloatingTypes);
  auto [new_h, new_cell, activated] = allocate_gates_forward(gates, old_cell);
  activated.copy_(gates);  // (the pass activates in place; the caller's gates stay)
  forward_pointwise(activated, old_cell.contiguous(), new_cell, new_h);
  return {new_h, new_cell, activated};
}

GatesBackwardOutputs lltm_gates_backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                             const at::Tensor& new_cell,
                                             const at::Tensor& activated) {
  check_gates_backward_args(grad_h, grad_cell, new_cell, activated, kAllFloatingTypes);
  auto [d_gates, d_old_cell] = allocate_gates_backward(new_cell);
  backward_pointwise(activated.contiguous(), new_cell.contiguous(), grad_h.contiguous(),
                     grad_cell.contiguous(), d_gates, d_old_cell);
  return {d_gates, d_old_cell};
}

SequenceForwardOutputs lltm_sequence_forward_cpu(const at::Tensor& input, const at::Tensor& weights,
                                                 const at::Tensor& bias, const at::Tensor& h0,
                                                 const at::Tensor& c0) {
  check_sequence_forward_args(input, weights, bias, h0, c0, kAllFloatingTypes);
  return run_sequence_forward(input, weights, bias, h0, c0, forward_pointwise);
}

SequenceInferenceOutputs lltm_sequence_inference_cpu(const at::Tensor& input,
                                                     const at::Tensor& weights,
                                                     const at::Tensor& bias, const at::Tensor& h0,
                                                     const at::Tensor& c0) {
  check_sequence_forward_args(input, weights, bias, h0, c0, kAllFloatingTypes);
  return run_sequence_inference(input, weights, bias, h0, c0, forward_pointwise);
}

SequenceBackwardOutputs lltm_sequence_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& grad_h_n, const at::Tensor& grad_c_n,
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& h0,
    const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
    std::array<bool, 3> output_mask) {
  check_sequence_backward_args(grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells,
                               gates, kAllFloatingTypes);
  return run_sequence_backward(grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells,
                               gates, output_mask, backward_pointwise);
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_cpu);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_cpu);
  m.impl("lltm_gates_forward", &tensortools::lltm::lltm_gates_forward_cpu);
  m.impl("lltm_gates_backward", &tensortools::lltm::lltm_gates_backward_cpu);
  m.impl("lltm_sequence_forward", &tensortools::lltm::lltm_sequence_forward_cpu);
  m.impl("lltm_sequence_backward", &tensortools::lltm::lltm_sequence_backward_cpu);
  m.impl("lltm_sequence_inference", &tensortools::lltm::lltm_sequence_inference_cpu);
}
