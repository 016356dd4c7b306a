// LLTM on CUDA: the matrix product through ATen (cuBLAS), then one fused pointwise kernel;
// backward: one fused pointwise kernel, then the matrix products. The sequence operator
// runs the same pointwise kernels once per step where its persistent kernels do not apply
// (lltm_sequence_kernel.cu). Half types compute in
// float (at::opmath_type); the maths is lltm_math.h, the same as the CPU kernel's.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/TensorAccessor.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../lltm.h"
#include "../lltm_math.h"
#include "launch.cuh"
#include "lltm_pointwise.cuh"

namespace tensortools::lltm {
namespace {

template <typename scalar_t, typename index_t>
using Accessor2 = at::GenericPackedTensorAccessor<scalar_t, 2, at::RestrictPtrTraits, index_t>;

// gates (B×3S) holds the pre-activation gates on entry and the activated ones on exit.
template <typename scalar_t, typename index_t>
__global__ void forward_kernel(Accessor2<scalar_t, index_t> gates,
                               Accessor2<const scalar_t, index_t> old_cell,
                               Accessor2<scalar_t, index_t> new_cell,
                               Accessor2<scalar_t, index_t> new_h) {
  using opmath_t = at::opmath_type<scalar_t>;
  const index_t S = old_cell.size(1);
  const index_t n = old_cell.size(0) * S;
  TENSORTOOLS_GRID_STRIDE_LOOP(k, n, index_t) {
    const index_t b = k / S, j = k % S;
    opmath_t i = gates[b][j], o = gates[b][S + j], c = gates[b][2 * S + j];
    opmath_t nc, nh;
    forward_element<opmath_t>(i, o, c, static_cast<opmath_t>(old_cell[b][j]), nc, nh);
    gates[b][j] = static_cast<scalar_t>(i);
    gates[b][S + j] = static_cast<scalar_t>(o);
    gates[b][2 * S + j] = static_cast<scalar_t>(c);
    new_cell[b][j] = static_cast<scalar_t>(nc);
    new_h[b][j] = static_cast<scalar_t>(nh);
  }
}

template <typename scalar_t, typename index_t>
__global__ void backward_kernel(Accessor2<const scalar_t, index_t> gates,
                                Accessor2<const scalar_t, index_t> new_cell,
                                Accessor2<const scalar_t, index_t> grad_h,
                                Accessor2<const scalar_t, index_t> grad_cell,
                                Accessor2<scalar_t, index_t> d_gates,
                                Accessor2<scalar_t, index_t> d_old_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  const index_t S = new_cell.size(1);
  const index_t n = new_cell.size(0) * S;
  TENSORTOOLS_GRID_STRIDE_LOOP(k, n, index_t) {
    const index_t b = k / S, j = k % S;
    opmath_t d_i, d_o, d_c, d_oc;
    backward_element<opmath_t>(gates[b][j], gates[b][S + j], gates[b][2 * S + j], new_cell[b][j],
                               grad_h[b][j], grad_cell[b][j], d_i, d_o, d_c, d_oc);
    d_gates[b][j] = static_cast<scalar_t>(d_i);
    d_gates[b][S + j] = static_cast<scalar_t>(d_o);
    d_gates[b][2 * S + j] = static_cast<scalar_t>(d_c);
    d_old_cell[b][j] = static_cast<scalar_t>(d_oc);
  }
}

template <typename scalar_t, typename index_t>
Accessor2<scalar_t, index_t> acc(const at::Tensor& t) {
  return t.generic_packed_accessor<scalar_t, 2, at::RestrictPtrTraits, index_t>();
}

}  // namespace

void forward_pointwise(const at::Tensor& gates, const at::Tensor& old_cell,
                       const at::Tensor& new_cell, const at::Tensor& new_h) {
  const int64_t n = new_cell.numel();
  if (n == 0) {
    return;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_forward_cuda", [&] {
        auto launch = [&](auto index) {
          using index_t = decltype(index);
          forward_kernel<scalar_t, index_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
              acc<scalar_t, index_t>(gates), acc<const scalar_t, index_t>(old_cell),
              acc<scalar_t, index_t>(new_cell), acc<scalar_t, index_t>(new_h));
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        cuda::fits_int32(gates) ? launch(int32_t{}) : launch(int64_t{});
      });
}

void backward_pointwise(const at::Tensor& gates, const at::Tensor& new_cell,
                        const at::Tensor& grad_h, const at::Tensor& grad_cell,
                        const at::Tensor& d_gates, const at::Tensor& d_old_cell) {
  const int64_t n = new_cell.numel();
  if (n == 0) {
    return;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_backward_cuda", [&] {
        auto launch = [&](auto index) {
          using index_t = decltype(index);
          backward_kernel<scalar_t, index_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
              acc<const scalar_t, index_t>(gates), acc<const scalar_t, index_t>(new_cell),
              acc<const scalar_t, index_t>(grad_h), acc<const scalar_t, index_t>(grad_cell),
              acc<scalar_t, index_t>(d_gates), acc<scalar_t, index_t>(d_old_cell));
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        cuda::fits_int32(gates) ? launch(int32_t{}) : launch(int64_t{});
      });
}

namespace {

ForwardOutputs lltm_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                                 const at::Tensor& bias, const at::Tensor& old_h,
                                 const at::Tensor& old_cell) {
  check_forward_args(input, weights, bias, old_h, old_cell, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  ForwardBuffers buf = forward_buffers(input, weights, bias, old_h, old_cell);
  forward_pointwise(buf.gates, buf.old_cell, buf.new_cell, buf.new_h);
  return {buf.new_h, buf.new_cell, buf.gates, buf.X};
}

BackwardOutputs lltm_backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                   const at::Tensor& new_cell, const at::Tensor& gates,
                                   const at::Tensor& X, const at::Tensor& weights) {
  check_backward_args(grad_h, grad_cell, new_cell, gates, X, weights, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(new_cell.device());
  BackwardBuffers buf = backward_buffers(grad_h, grad_cell, new_cell, gates, X);
  backward_pointwise(buf.gates, buf.new_cell, buf.grad_h, buf.grad_cell, buf.d_gates,
                     buf.d_old_cell);
  backward_products(buf, X, weights);
  return buf.outputs();
}

GatesForwardOutputs lltm_gates_forward_cuda(const at::Tensor& gates, const at::Tensor& old_cell) {
  check_gates_forward_args(gates, old_cell, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(gates.device());
  auto [new_h, new_cell, activated] = allocate_gates_forward(gates, old_cell);
  activated.copy_(gates);  // (the pass activates in place; the caller's gates stay)
  forward_pointwise(activated, old_cell.contiguous(), new_cell, new_h);
  return {new_h, new_cell, activated};
}

GatesBackwardOutputs lltm_gates_backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                              const at::Tensor& new_cell,
                                              const at::Tensor& activated) {
  check_gates_backward_args(grad_h, grad_cell, new_cell, activated, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(new_cell.device());
  auto [d_gates, d_old_cell] = allocate_gates_backward(new_cell);
  backward_pointwise(activated.contiguous(), new_cell.contiguous(), grad_h.contiguous(),
                     grad_cell.contiguous(), d_gates, d_old_cell);
  return {d_gates, d_old_cell};
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("lltm_forward", &tensortools::lltm::lltm_forward_cuda);
  m.impl("lltm_backward", &tensortools::lltm::lltm_backward_cuda);
  m.impl("lltm_gates_forward", &tensortools::lltm::lltm_gates_forward_cuda);
  m.impl("lltm_gates_backward", &tensortools::lltm::lltm_gates_backward_cuda);
}
