// conv_bn2d on CUDA. ATen (cuDNN) computes the convolution and its backward; the batch
// statistics, the normalisation, the backward's reductions and grad_z are our kernels:
// one block per (n, c) plane reduces it (Welford per thread, merged in shared memory),
// one thread per channel merges the planes (Chan's formula) and derives the per-channel
// constants, and one grid-stride kernel rewrites z in place. Half types accumulate in float.
#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../conv_bn2d.h"
#include "launch.cuh"

namespace tensortools::conv_bn2d {
namespace {

template <typename acc_t>
struct Moments {
  acc_t count, mean, m2;
};

// Chan et al.: the moments of the union of two disjoint sets.
template <typename acc_t>
__device__ Moments<acc_t> merge(Moments<acc_t> a, Moments<acc_t> b) {
  const acc_t count = a.count + b.count;
  if (count == acc_t(0)) {
    return a;
  }
  const acc_t delta = b.mean - a.mean;
  const acc_t wb = b.count / count;
  return {count, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
}

// Per plane p = n*C + c of z (N×C×HW): its mean and sum of squared deviations.
template <typename scalar_t, typename acc_t>
__global__ void plane_moments_kernel(const scalar_t* __restrict__ z, int64_t planes, int64_t HW,
                                     acc_t* __restrict__ plane_mean, acc_t* __restrict__ plane_m2) {
  __shared__ Moments<acc_t> shared[cuda::kThreads];
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const scalar_t* x = z + p * HW;
    Moments<acc_t> m{0, 0, 0};
    for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) {
      const acc_t v = static_cast<acc_t>(x[i]);
      m.count += acc_t(1);
      const acc_t delta = v - m.mean;
      m.mean += delta / m.count;
      m.m2 += delta * (v - m.mean);
    }
    shared[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) {
        shared[threadIdx.x] = merge(shared[threadIdx.x], shared[threadIdx.x + s]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      plane_mean[p] = shared[0].mean;
      plane_m2[p] = shared[0].m2;
    }
    __syncthreads();  // shared[] is reused by the next plane
  }
}

// Per channel: mean and biased variance over the N planes, and the normalisation's
// scale = gamma / sqrt(var + eps) and offset = beta.
template <typename acc_t, typename stat_t, typename param_t>
__global__ void channel_stats_kernel(const acc_t* __restrict__ plane_mean,
                                     const acc_t* __restrict__ plane_m2, int64_t N, int64_t C,
                                     int64_t HW, const param_t* __restrict__ gamma,
                                     const param_t* __restrict__ beta, double eps,
                                     stat_t* __restrict__ mean, stat_t* __restrict__ var,
                                     acc_t* __restrict__ scale, acc_t* __restrict__ offset) {
  TENSORTOOLS_GRID_STRIDE_LOOP(c, C, int64_t) {
    acc_t m = 0;
    for (int64_t n = 0; n < N; ++n) {
      m += plane_mean[n * C + c];
    }
    m = N > 0 ? m / static_cast<acc_t>(N) : acc_t(0);
    acc_t m2 = 0, spread = 0;
    for (int64_t n = 0; n < N; ++n) {
      const acc_t d = plane_mean[n * C + c] - m;
      m2 += plane_m2[n * C + c];
      spread += d * d;
    }
    const acc_t v =
        N > 0 ? (m2 + static_cast<acc_t>(HW) * spread) / static_cast<acc_t>(N * HW) : acc_t(0);
    mean[c] = static_cast<stat_t>(m);
    var[c] = static_cast<stat_t>(v);
    const acc_t g = gamma != nullptr ? static_cast<acc_t>(gamma[c]) : acc_t(1);
    scale[c] = g / std::sqrt(v + static_cast<acc_t>(eps));
    offset[c] = beta != nullptr ? static_cast<acc_t>(beta[c]) : acc_t(0);
  }
}

// z = (z - shift[c]) * scale[c] + offset[c], in place.
template <typename scalar_t, typename acc_t, typename stat_t>
__global__ void normalize_kernel(scalar_t* __restrict__ z, int64_t n, int64_t C, int64_t HW,
                                 const stat_t* __restrict__ shift, const acc_t* __restrict__ scale,
                                 const acc_t* __restrict__ offset) {
  TENSORTOOLS_GRID_STRIDE_LOOP(i, n, int64_t) {
    const int64_t c = (i / HW) % C;
    const acc_t v = static_cast<acc_t>(z[i]);
    z[i] = static_cast<scalar_t>((v - static_cast<acc_t>(shift[c])) * scale[c] + offset[c]);
  }
}

// Per plane: sum(dy) and sum(dy * (z - mean[c])).
template <typename scalar_t, typename acc_t, typename stat_t>
__global__ void plane_grad_sums_kernel(const scalar_t* __restrict__ dy,
                                       const scalar_t* __restrict__ z, int64_t planes, int64_t C,
                                       int64_t HW, const stat_t* __restrict__ mean,
                                       acc_t* __restrict__ plane_dy,
                                       acc_t* __restrict__ plane_dot) {
  __shared__ acc_t shared_dy[cuda::kThreads];
  __shared__ acc_t shared_dot[cuda::kThreads];
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const acc_t m = static_cast<acc_t>(mean[p % C]);
    acc_t s = 0, q = 0;
    for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) {
      const acc_t d = static_cast<acc_t>(dy[p * HW + i]);
      s += d;
      q += d * (static_cast<acc_t>(z[p * HW + i]) - m);
    }
    shared_dy[threadIdx.x] = s;
    shared_dot[threadIdx.x] = q;
    __syncthreads();
    for (int r = blockDim.x / 2; r > 0; r /= 2) {
      if (threadIdx.x < r) {
        shared_dy[threadIdx.x] += shared_dy[threadIdx.x + r];
        shared_dot[threadIdx.x] += shared_dot[threadIdx.x + r];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      plane_dy[p] = shared_dy[0];
      plane_dot[p] = shared_dot[0];
    }
    __syncthreads();
  }
}

// Per channel: the sums over planes, grad_gamma/grad_beta, and the constants of
// grad_z = (dy + (z - mean) * k1 + k0) * k2.
template <typename acc_t, typename stat_t, typename param_t, typename out_t>
__global__ void channel_grad_kernel(const acc_t* __restrict__ plane_dy,
                                    const acc_t* __restrict__ plane_dot, int64_t N, int64_t C,
                                    int64_t HW, const stat_t* __restrict__ var,
                                    const param_t* __restrict__ gamma, double eps,
                                    out_t* __restrict__ grad_gamma, out_t* __restrict__ grad_beta,
                                    acc_t* __restrict__ k) {
  TENSORTOOLS_GRID_STRIDE_LOOP(c, C, int64_t) {
    acc_t sum_dy = 0, dot = 0;
    for (int64_t n = 0; n < N; ++n) {
      sum_dy += plane_dy[n * C + c];
      dot += plane_dot[n * C + c];
    }
    const acc_t invstd = acc_t(1) / std::sqrt(static_cast<acc_t>(var[c]) + static_cast<acc_t>(eps));
    const acc_t count = static_cast<acc_t>(N * HW);
    const acc_t g = gamma != nullptr ? static_cast<acc_t>(gamma[c]) : acc_t(1);
    if (grad_gamma != nullptr) {
      grad_gamma[c] = static_cast<out_t>(dot * invstd);
      grad_beta[c] = static_cast<out_t>(sum_dy);
    }
    k[3 * c] = count > acc_t(0) ? -invstd * invstd * dot / count : acc_t(0);
    k[3 * c + 1] = count > acc_t(0) ? -sum_dy / count : acc_t(0);
    k[3 * c + 2] = g * invstd;
  }
}

template <typename scalar_t, typename acc_t, typename stat_t>
__global__ void grad_z_kernel(const scalar_t* __restrict__ dy, scalar_t* __restrict__ z, int64_t n,
                              int64_t C, int64_t HW, const stat_t* __restrict__ mean,
                              const acc_t* __restrict__ k) {
  TENSORTOOLS_GRID_STRIDE_LOOP(i, n, int64_t) {
    const int64_t c = (i / HW) % C;
    const acc_t centered = static_cast<acc_t>(z[i]) - static_cast<acc_t>(mean[c]);
    z[i] = static_cast<scalar_t>((static_cast<acc_t>(dy[i]) + centered * k[3 * c] + k[3 * c + 1]) *
                                 k[3 * c + 2]);
  }
}

template <typename T>
const T* optional_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->const_data_ptr<T>() : nullptr;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_bn2d_forward_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& gamma_,
    const std::optional<at::Tensor>& beta_, at::IntArrayRef stride, at::IntArrayRef padding,
    double eps) {
  const c10::SymDimVector shape =
      check_forward_args(input, weight, gamma_, beta_, stride, padding, eps, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  const auto contiguous = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    return t.has_value() && t->defined() ? std::optional<at::Tensor>(t->contiguous())
                                         : std::nullopt;
  };
  const auto gamma = contiguous(gamma_), beta = contiguous(beta_);
  at::Tensor z = convolve(input, weight, stride, padding, shape);
  const int64_t N = z.size(0), C = z.size(1), HW = z.size(2) * z.size(3);
  at::Tensor mean = allocate_stats(input, C), var = allocate_stats(input, C);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, z.scalar_type(), "conv_bn2d_forward_cuda", [&] {
        using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
        using stat_t = at::opmath_type<scalar_t>;
        const auto acc_options = z.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
        at::Tensor planes = at::empty({2, N * C}, acc_options);
        at::Tensor constants = at::empty({2, C}, acc_options);
        acc_t* plane_mean = planes.data_ptr<acc_t>();
        acc_t* scale = constants.data_ptr<acc_t>();
        if (N * C > 0) {
          plane_moments_kernel<scalar_t, acc_t>
              <<<cuda::blocks_for(N * C, 1), cuda::kThreads, 0, stream>>>(
                  z.const_data_ptr<scalar_t>(), N * C, HW, plane_mean, plane_mean + N * C);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        channel_stats_kernel<acc_t, stat_t, scalar_t>
            <<<cuda::blocks_for(C), cuda::kThreads, 0, stream>>>(
                plane_mean, plane_mean + N * C, N, C, HW, optional_ptr<scalar_t>(gamma),
                optional_ptr<scalar_t>(beta), eps, mean.data_ptr<stat_t>(), var.data_ptr<stat_t>(),
                scale, scale + C);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        if (z.numel() > 0) {
          normalize_kernel<scalar_t, acc_t, stat_t>
              <<<cuda::blocks_for(z.numel()), cuda::kThreads, 0, stream>>>(
                  z.data_ptr<scalar_t>(), z.numel(), C, HW, mean.const_data_ptr<stat_t>(), scale,
                  scale + C);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
      });
  return {z, mean, var};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_bn2d_backward_cuda(
    const at::Tensor& grad_output_, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& gamma_, const at::Tensor& mean_, const at::Tensor& var_,
    at::IntArrayRef stride, at::IntArrayRef padding, double eps, std::array<bool, 3> output_mask) {
  check_backward_args(grad_output_, input, weight, gamma_, mean_, var_, stride, padding, eps,
                      kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor grad_output = grad_output_.contiguous();
  const at::Tensor mean = mean_.contiguous(), var = var_.contiguous();
  const std::optional<at::Tensor> gamma = gamma_.has_value() && gamma_->defined()
                                              ? std::optional<at::Tensor>(gamma_->contiguous())
                                              : std::nullopt;
  // recomputed, then overwritten
  at::Tensor z = convolve(input, weight, stride, padding, grad_output.sym_sizes());
  const int64_t N = z.size(0), C = z.size(1), HW = z.size(2) * z.size(3);
  // Named variables, not structured bindings: C++17 lambdas cannot capture those.
  at::Tensor grad_input, grad_weight, grad_gamma, grad_beta;
  std::tie(grad_input, grad_weight, grad_gamma, grad_beta) =
      allocate_backward(input, weight, output_mask);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, z.scalar_type(), "conv_bn2d_backward_cuda", [&] {
        using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
        using stat_t = at::opmath_type<scalar_t>;
        const auto acc_options = z.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
        at::Tensor planes = at::empty({2, N * C}, acc_options);
        at::Tensor k = at::empty({C, 3}, acc_options);
        acc_t* plane_dy = planes.data_ptr<acc_t>();
        if (N * C > 0) {
          plane_grad_sums_kernel<scalar_t, acc_t, stat_t>
              <<<cuda::blocks_for(N * C, 1), cuda::kThreads, 0, stream>>>(
                  grad_output.const_data_ptr<scalar_t>(), z.const_data_ptr<scalar_t>(), N * C, C,
                  HW, mean.const_data_ptr<stat_t>(), plane_dy, plane_dy + N * C);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        channel_grad_kernel<acc_t, stat_t, scalar_t, scalar_t>
            <<<cuda::blocks_for(C), cuda::kThreads, 0, stream>>>(
                plane_dy, plane_dy + N * C, N, C, HW, var.const_data_ptr<stat_t>(),
                optional_ptr<scalar_t>(gamma), eps,
                output_mask[2] ? grad_gamma.data_ptr<scalar_t>() : nullptr,
                output_mask[2] ? grad_beta.data_ptr<scalar_t>() : nullptr, k.data_ptr<acc_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        if ((output_mask[0] || output_mask[1]) && z.numel() > 0) {
          grad_z_kernel<scalar_t, acc_t, stat_t>
              <<<cuda::blocks_for(z.numel()), cuda::kThreads, 0, stream>>>(
                  grad_output.const_data_ptr<scalar_t>(), z.data_ptr<scalar_t>(), z.numel(), C, HW,
                  mean.const_data_ptr<stat_t>(), k.const_data_ptr<acc_t>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
      });
  std::tie(grad_input, grad_weight) =
      convolve_backward(z, input, weight, stride, padding, {output_mask[0], output_mask[1]});
  return {grad_input, grad_weight, grad_gamma, grad_beta};
}

}  // namespace
}  // namespace tensortools::conv_bn2d

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("conv_bn2d_forward", &tensortools::conv_bn2d::conv_bn2d_forward_cuda);
  m.impl("conv_bn2d_backward", &tensortools::conv_bn2d::conv_bn2d_backward_cuda);
}
