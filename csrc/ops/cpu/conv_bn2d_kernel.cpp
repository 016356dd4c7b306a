// conv_bn2d on the CPU. ATen computes the convolution; the batch statistics, the
// normalisation and the backward's reductions and grad_z are our kernels, each one
// at::parallel_for over the (n, c) planes of z, so a plane is read twice while in cache and
// memory sees one pass for the statistics and one for the normalisation. Statistics
// accumulate in double and merge per channel with Chan's formula (no E[z^2] - E[z]^2
// cancellation); results are written over z, which is ours.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "../../checks.h"
#include "../conv_bn2d.h"
#include "parallel.h"

namespace tensortools::conv_bn2d {
namespace {

// Per-channel values of an optional per-channel tensor, in double (`fill` where absent).
std::vector<double> channel_values(const std::optional<at::Tensor>& t, int64_t C, double fill) {
  if (!t.has_value() || !t->defined()) {
    return std::vector<double>(C, fill);
  }
  const at::Tensor d = t->to(at::kDouble).contiguous();
  const double* p = d.const_data_ptr<double>();
  return std::vector<double>(p, p + C);
}

// Mean and biased variance per channel of z (N×C×HW), into mean/var (length C).
template <typename T>
void channel_moments(const T* z, int64_t N, int64_t C, int64_t HW, std::vector<double>& mean,
                     std::vector<double>& var) {
  std::vector<double> plane_mean(N * C), plane_m2(N * C);
  at::parallel_for(0, N * C, cpu::grain_for(HW), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* x = z + p * HW;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < HW; ++i) {
        sum += static_cast<double>(x[i]);
      }
      const double m = sum / static_cast<double>(HW);
      double m2 = 0;
#pragma omp simd reduction(+ : m2)
      for (int64_t i = 0; i < HW; ++i) {
        const double d = static_cast<double>(x[i]) - m;
        m2 += d * d;
      }
      plane_mean[p] = m;
      plane_m2[p] = m2;
    }
  });
  // Chan et al.: planes of equal size combine as M2 = sum M2_p + HW * sum (mean_p - mean)^2.
  for (int64_t c = 0; c < C; ++c) {
    if (N == 0) {
      mean[c] = var[c] = 0;
      continue;
    }
    double m = 0;
    for (int64_t n = 0; n < N; ++n) {
      m += plane_mean[n * C + c];
    }
    m /= static_cast<double>(N);
    double m2 = 0, spread = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double d = plane_mean[n * C + c] - m;
      m2 += plane_m2[n * C + c];
      spread += d * d;
    }
    mean[c] = m;
    var[c] = (m2 + static_cast<double>(HW) * spread) / static_cast<double>(N * HW);
  }
}

// out = (z - shift) * scale + offset per plane, in place; the per-channel constants are
// rounded to T once, so float32 runs in float32 and vectorises.
template <typename T>
void affine_planes(T* z, int64_t N, int64_t C, int64_t HW, const std::vector<double>& shift,
                   const std::vector<double>& scale, const std::vector<double>& offset) {
  at::parallel_for(0, N * C, cpu::grain_for(HW), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t c = p % C;
      const T s = static_cast<T>(shift[c]), k = static_cast<T>(scale[c]);
      const T o = static_cast<T>(offset[c]);
      T* x = z + p * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) {
        x[i] = (x[i] - s) * k + o;
      }
    }
  });
}

// Per channel of dy and z (N×C×HW): sum(dy) and sum(dy * (z - mean)).
template <typename T>
void channel_grad_sums(const T* dy, const T* z, int64_t N, int64_t C, int64_t HW,
                       const std::vector<double>& mean, std::vector<double>& sum_dy,
                       std::vector<double>& dot) {
  std::vector<double> plane_dy(N * C), plane_dot(N * C);
  at::parallel_for(0, N * C, cpu::grain_for(HW), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* x = z + p * HW;
      const T* d = dy + p * HW;
      const double m = mean[p % C];
      double s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
      for (int64_t i = 0; i < HW; ++i) {
        const double di = static_cast<double>(d[i]);
        s += di;
        q += di * (static_cast<double>(x[i]) - m);
      }
      plane_dy[p] = s;
      plane_dot[p] = q;
    }
  });
  for (int64_t p = 0; p < N * C; ++p) {
    sum_dy[p % C] += plane_dy[p];
    dot[p % C] += plane_dot[p];
  }
}

// grad_z = (dy + (z - mean) * k1 + k0) * k2 per plane, written over z; dy and z are read
// once each.
template <typename T>
void grad_planes(const T* dy, T* z, int64_t N, int64_t C, int64_t HW,
                 const std::vector<double>& mean, const std::vector<double>& k1,
                 const std::vector<double>& k0, const std::vector<double>& k2) {
  at::parallel_for(0, N * C, cpu::grain_for(HW), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t c = p % C;
      const T m = static_cast<T>(mean[c]), a = static_cast<T>(k1[c]);
      const T o = static_cast<T>(k0[c]), s = static_cast<T>(k2[c]);
      T* x = z + p * HW;
      const T* d = dy + p * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) {
        x[i] = (d[i] + (x[i] - m) * a + o) * s;
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_bn2d_forward_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& gamma,
    const std::optional<at::Tensor>& beta, at::IntArrayRef stride, at::IntArrayRef padding,
    double eps) {
  const c10::SymDimVector shape =
      check_forward_args(input, weight, gamma, beta, stride, padding, eps, kCpuFloatingTypes);
  at::Tensor z = convolve(input, weight, stride, padding, shape);
  const int64_t N = z.size(0), C = z.size(1), HW = z.size(2) * z.size(3);
  std::vector<double> mean(C), var(C), scale(C);
  const std::vector<double> g = channel_values(gamma, C, 1.0);
  const std::vector<double> b = channel_values(beta, C, 0.0);

  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "conv_bn2d_forward_cpu", [&] {
    scalar_t* data = z.data_ptr<scalar_t>();
    channel_moments(data, N, C, HW, mean, var);
    for (int64_t c = 0; c < C; ++c) {
      scale[c] = g[c] / std::sqrt(var[c] + eps);
    }
    affine_planes(data, N, C, HW, mean, scale, b);
  });
  auto to_tensor = [&](const std::vector<double>& v) {
    return allocate_stats(input, C).copy_(at::tensor(v, at::TensorOptions().dtype(at::kDouble)));
  };
  return {z, to_tensor(mean), to_tensor(var)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_bn2d_backward_cpu(
    const at::Tensor& grad_output_, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& gamma, const at::Tensor& mean_, const at::Tensor& var_,
    at::IntArrayRef stride, at::IntArrayRef padding, double eps, std::array<bool, 3> output_mask) {
  check_backward_args(grad_output_, input, weight, gamma, mean_, var_, stride, padding, eps,
                      kCpuFloatingTypes);
  // Gradients arriving from reductions are often expanded (stride 0): copy once here.
  const at::Tensor grad_output = grad_output_.contiguous();
  // recomputed, then overwritten
  at::Tensor z = convolve(input, weight, stride, padding, grad_output.sym_sizes());
  const int64_t N = z.size(0), C = z.size(1), HW = z.size(2) * z.size(3);
  const double count = static_cast<double>(N * HW);
  const std::vector<double> mean = channel_values(mean_, C, 0.0);
  const std::vector<double> var = channel_values(var_, C, 0.0);
  const std::vector<double> g = channel_values(gamma, C, 1.0);
  std::vector<double> sum_dy(C, 0.0), dot(C, 0.0);

  std::vector<double> k2(C), k1(C), k0(C);
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "conv_bn2d_backward_cpu", [&] {
    const scalar_t* dy = grad_output.const_data_ptr<scalar_t>();
    scalar_t* data = z.data_ptr<scalar_t>();
    channel_grad_sums(dy, data, N, C, HW, mean, sum_dy, dot);
    if (!output_mask[0] && !output_mask[1]) {
      return;
    }
    // grad_z = g*invstd * (dy - sum_dy/count - (z - mean) * invstd^2 * dot/count)
    for (int64_t c = 0; c < C; ++c) {
      const double invstd = 1.0 / std::sqrt(var[c] + eps);
      k2[c] = g[c] * invstd;
      k1[c] = count > 0 ? -invstd * invstd * dot[c] / count : 0.0;
      k0[c] = count > 0 ? -sum_dy[c] / count : 0.0;
    }
    grad_planes(dy, data, N, C, HW, mean, k1, k0, k2);
  });

  // Named variables, not structured bindings: C++17 lambdas cannot capture those.
  at::Tensor grad_input, grad_weight, grad_gamma, grad_beta;
  std::tie(grad_input, grad_weight, grad_gamma, grad_beta) =
      allocate_backward(input, weight, output_mask);
  std::tie(grad_input, grad_weight) =
      convolve_backward(z, input, weight, stride, padding, {output_mask[0], output_mask[1]});
  if (output_mask[2]) {
    std::vector<double> gg(C);
    for (int64_t c = 0; c < C; ++c) {
      gg[c] = dot[c] / std::sqrt(var[c] + eps);
    }
    const auto options = at::TensorOptions().dtype(at::kDouble);
    grad_gamma.copy_(at::tensor(gg, options));
    grad_beta.copy_(at::tensor(sum_dy, options));
  }
  return {grad_input, grad_weight, grad_gamma, grad_beta};
}

}  // namespace
}  // namespace tensortools::conv_bn2d

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("conv_bn2d_forward", &tensortools::conv_bn2d::conv_bn2d_forward_cpu);
  m.impl("conv_bn2d_backward", &tensortools::conv_bn2d::conv_bn2d_backward_cpu);
}
