// ScalarTensor kernels on CUDA: one grid-stride pass each over the contiguous input. The
// value is read on the device, so no call waits for the GPU.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <tuple>

#include "../scalar_ops.h"
#include "../wrapping.h"
#include "launch.cuh"

namespace tensortools::scalar_ops {
namespace {

// out = in + value * I over the last two dimensions (n×n matrices, any batch).
template <typename scalar_t>
__global__ void add_diagonal_kernel(const scalar_t* __restrict__ in,
                                    const scalar_t* __restrict__ value, scalar_t* __restrict__ out,
                                    int64_t numel, int64_t n) {
  const scalar_t v = *value;
  // Adding zero off the diagonal (rather than copying) matches the dense sum bit for bit:
  // -0.0 + 0 is +0.0.
  const scalar_t zero = scalar_t(0);
  TENSORTOOLS_GRID_STRIDE_LOOP(k, numel, int64_t) {
    const int64_t within = k % (n * n);
    const bool diagonal = within / n == within % n;
    out[k] = wrapping_add(in[k], diagonal ? v : zero);
  }
}

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ in, const scalar_t* __restrict__ value,
                             scalar_t* __restrict__ out, int64_t numel) {
  const scalar_t v = *value;
  TENSORTOOLS_GRID_STRIDE_LOOP(k, numel, int64_t) { out[k] = wrapping_mul(v, in[k]); }
}

// scale_kernel that also clears *all_finite when an input element is not finite (every
// writer stores the same value, so the race is benign).
template <typename scalar_t>
__global__ void scale_finite_kernel(const scalar_t* __restrict__ in,
                                    const scalar_t* __restrict__ value, scalar_t* __restrict__ out,
                                    bool* __restrict__ all_finite, int64_t numel) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t v = *value;
  bool finite = true;
  TENSORTOOLS_GRID_STRIDE_LOOP(k, numel, int64_t) {
    const scalar_t x = in[k];
    out[k] = wrapping_mul(v, x);
    finite = finite && ::isfinite(static_cast<acc_t>(x));
  }
  if (!finite) {
    *all_finite = false;
  }
}

at::Tensor add_diagonal_cuda(const at::Tensor& self_, const at::Tensor& value) {
  check_add_diagonal_args(self_, value);
  const c10::cuda::CUDAGuard guard(self_.device());
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  if (self.numel() == 0) {
    return out;
  }
  AT_DISPATCH_ALL_TYPES_AND2(
      at::kHalf, at::kBFloat16, self.scalar_type(), "add_diagonal_cuda", [&] {
        add_diagonal_kernel<scalar_t><<<cuda::blocks_for(self.numel()), cuda::kThreads, 0,
                                        c10::cuda::getCurrentCUDAStream()>>>(
            self.const_data_ptr<scalar_t>(), value.const_data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), self.numel(), self.size(-1));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return out;
}

at::Tensor scale_cuda(const at::Tensor& self_, const at::Tensor& value) {
  check_scale_args(self_, value);
  const c10::cuda::CUDAGuard guard(self_.device());
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  if (self.numel() == 0) {
    return out;
  }
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "scale_cuda", [&] {
    scale_kernel<scalar_t>
        <<<cuda::blocks_for(self.numel()), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            self.const_data_ptr<scalar_t>(), value.const_data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), self.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> scale_finite_cuda(const at::Tensor& self_,
                                                     const at::Tensor& value) {
  check_scale_args(self_, value, "tensortools.scale_finite");
  const c10::cuda::CUDAGuard guard(self_.device());
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  at::Tensor all_finite = at::ones({}, all_finite_options(self));
  if (self.numel() == 0) {
    return {out, all_finite};
  }
  if (!at::isFloatingType(self.scalar_type())) {
    return {scale_cuda(self, value), all_finite};  // integers are always finite
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, self.scalar_type(), "scale_finite_cuda", [&] {
        scale_finite_kernel<scalar_t><<<cuda::blocks_for(self.numel()), cuda::kThreads, 0,
                                        c10::cuda::getCurrentCUDAStream()>>>(
            self.const_data_ptr<scalar_t>(), value.const_data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), all_finite.data_ptr<bool>(), self.numel());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return {out, all_finite};
}

}  // namespace
}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("add_diagonal", &tensortools::scalar_ops::add_diagonal_cuda);
  m.impl("scale", &tensortools::scalar_ops::scale_cuda);
  m.impl("scale_finite", &tensortools::scalar_ops::scale_finite_cuda);
}
