// ScalarTensor kernels on CUDA: one grid-stride pass each over the contiguous input. The
// value is read on the device, so no call waits for the GPU.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "../scalar_ops.h"
#include "launch.cuh"

namespace tensortools::scalar_ops {
namespace {

// out = in + value * I over the last two dimensions (n×n matrices, any batch).
template <typename scalar_t>
__global__ void add_diagonal_kernel(const scalar_t* __restrict__ in,
                                    const scalar_t* __restrict__ value,
                                    scalar_t* __restrict__ out, int64_t numel, int64_t n) {
  const scalar_t v = *value;
  // Adding zero off the diagonal (rather than copying) matches the dense sum bit for bit:
  // -0.0 + 0 is +0.0.
  const scalar_t zero = scalar_t(0);
  TENSORTOOLS_GRID_STRIDE_LOOP(k, numel, int64_t) {
    const int64_t within = k % (n * n);
    const bool diagonal = within / n == within % n;
    out[k] = static_cast<scalar_t>(in[k] + (diagonal ? v : zero));
  }
}

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ in, const scalar_t* __restrict__ value,
                             scalar_t* __restrict__ out, int64_t numel) {
  const scalar_t v = *value;
  TENSORTOOLS_GRID_STRIDE_LOOP(k, numel, int64_t) {
    out[k] = static_cast<scalar_t>(v * in[k]);
  }
}

at::Tensor add_diagonal_cuda(const at::Tensor& self_, const at::Tensor& value) {
  check_add_diagonal_args(self_, value);
  const c10::cuda::CUDAGuard guard(self_.device());
  const at::Tensor self = self_.contiguous();
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  if (self.numel() == 0) {
    return out;
  }
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "add_diagonal_cuda",
                             [&] {
    add_diagonal_kernel<scalar_t>
        <<<cuda::blocks_for(self.numel()), cuda::kThreads, 0,
           c10::cuda::getCurrentCUDAStream()>>>(self.const_data_ptr<scalar_t>(),
                                                value.const_data_ptr<scalar_t>(),
                                                out.data_ptr<scalar_t>(), self.numel(),
                                                self.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

at::Tensor scale_cuda(const at::Tensor& self_, const at::Tensor& value) {
  check_scale_args(self_, value);
  const c10::cuda::CUDAGuard guard(self_.device());
  const at::Tensor self = self_.contiguous();
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  if (self.numel() == 0) {
    return out;
  }
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "scale_cuda", [&] {
    scale_kernel<scalar_t><<<cuda::blocks_for(self.numel()), cuda::kThreads, 0,
                             c10::cuda::getCurrentCUDAStream()>>>(
        self.const_data_ptr<scalar_t>(), value.const_data_ptr<scalar_t>(),
        out.data_ptr<scalar_t>(), self.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace
}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("add_diagonal", &tensortools::scalar_ops::add_diagonal_cuda);
  m.impl("scale", &tensortools::scalar_ops::scale_cuda);
}
