// axpby on CUDA: one grid-stride pass, broadcasting as torch does. x and y are expanded to
// the output's shape (stride 0 where broadcast) and read through their strides, so nothing
// is copied; the same-shape contiguous case takes a flat loop.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../axpby.h"
#include "launch.cuh"

namespace tensortools::axpby {
namespace {

constexpr int kMaxDims = 8;

// The output's sizes and the inputs' strides (in elements), innermost dimension last.
struct Layout {
  int dims;
  int64_t sizes[kMaxDims];
  int64_t x_strides[kMaxDims];
  int64_t y_strides[kMaxDims];
};

template <typename scalar_t, typename opmath_t>
__global__ void axpby_flat_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                                  scalar_t* __restrict__ out, int64_t n, opmath_t a, opmath_t b) {
  TENSORTOOLS_GRID_STRIDE_LOOP(i, n, int64_t) {
    out[i] =
        static_cast<scalar_t>(a * static_cast<opmath_t>(x[i]) + b * static_cast<opmath_t>(y[i]));
  }
}

template <typename scalar_t, typename opmath_t>
__global__ void axpby_strided_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                                     scalar_t* __restrict__ out, int64_t n, Layout layout,
                                     opmath_t a, opmath_t b) {
  TENSORTOOLS_GRID_STRIDE_LOOP(i, n, int64_t) {
    int64_t rest = i, xo = 0, yo = 0;
    for (int d = layout.dims - 1; d >= 0; --d) {
      const int64_t index = rest % layout.sizes[d];
      rest /= layout.sizes[d];
      xo += index * layout.x_strides[d];
      yo += index * layout.y_strides[d];
    }
    out[i] =
        static_cast<scalar_t>(a * static_cast<opmath_t>(x[xo]) + b * static_cast<opmath_t>(y[yo]));
  }
}

at::Tensor axpby_cuda(const at::Tensor& x_, const at::Tensor& y_, const at::Scalar& alpha,
                      const at::Scalar& beta) {
  check_args(x_, y_, alpha, beta, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(x_.device());
  const auto shape = at::infer_size(x_.sizes(), y_.sizes());
  at::Tensor x = x_.expand(shape), y = y_.expand(shape);
  if (x.dim() > kMaxDims) {  // rare: materialise rather than index more dimensions
    x = x.contiguous();
    y = y.contiguous();
  }
  at::Tensor out = allocate_output(x_, y_);
  const int64_t n = out.numel();
  if (n == 0) {
    return out;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "axpby_cuda", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    // Rounded like torch rounds a Python number for this dtype (1e300 is inf in float).
    const opmath_t a = static_cast<opmath_t>(alpha.toDouble());
    const opmath_t b = static_cast<opmath_t>(beta.toDouble());
    if (x.is_contiguous() && y.is_contiguous()) {
      axpby_flat_kernel<scalar_t, opmath_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n,
          a, b);
    } else {
      Layout layout{static_cast<int>(out.dim()), {}, {}, {}};
      for (int d = 0; d < layout.dims; ++d) {
        layout.sizes[d] = out.size(d);
        layout.x_strides[d] = x.stride(d);
        layout.y_strides[d] = y.stride(d);
      }
      axpby_strided_kernel<scalar_t, opmath_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n,
          layout, a, b);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace
}  // namespace tensortools::axpby

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) { m.impl("axpby", &tensortools::axpby::axpby_cuda); }
