// ScalarTensor kernels on the CPU: one parallel pass each over contiguous rows.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <tuple>
#include <type_traits>

#include "../scalar_ops.h"
#include "../wrapping.h"
#include "parallel.h"

namespace tensortools::scalar_ops {
namespace {

// Rows [r0, r1) of add_diagonal over n×n matrices stored one after another. A function of
// its own so that __restrict tells the compiler that out does not alias in, which it
// needs to vectorise.
template <typename scalar_t>
void add_diagonal_rows(const scalar_t* __restrict in, scalar_t v, scalar_t* __restrict out,
                       int64_t r0, int64_t r1, int64_t n) {
  // Adding zero off the diagonal (rather than copying) matches the dense sum bit for bit:
  // -0.0 + 0 is +0.0.
  const scalar_t zero = scalar_t(0);
  for (int64_t r = r0; r < r1; ++r) {
    const scalar_t* src = in + r * n;
    scalar_t* dst = out + r * n;
    for (int64_t j = 0; j < n; ++j) {
      dst[j] = static_cast<scalar_t>(src[j] + zero);
    }
    const int64_t i = r % n;
    dst[i] = wrapping_add(src[i], v);
  }
}

at::Tensor add_diagonal_cpu(const at::Tensor& self_, const at::Tensor& value) {
  check_add_diagonal_args(self_, value);
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  const int64_t n = self.size(-1);
  const int64_t rows = n == 0 ? 0 : self.numel() / n;  // batch * n
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "add_diagonal_cpu", [&] {
    const scalar_t v = value.item<scalar_t>();
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, cpu::grain_for(n), [&](int64_t begin, int64_t end) {
      add_diagonal_rows(in, v, o, begin, end, n);
    });
  });
  return out;
}

// out = v * in over [0, n); with CheckFinite, clears *finite if an in[k] is not finite.
// A function of its own so that __restrict tells the compiler that out does not alias
// in, which it needs to vectorise.
template <typename scalar_t, bool CheckFinite>
void scale_block(const scalar_t* __restrict in, scalar_t v, scalar_t* __restrict out, int64_t n,
                 bool* __restrict finite) {
  using acc_t = at::opmath_type<scalar_t>;
  // in[k] * 0 is 0 for a finite in[k] and NaN otherwise; summed into kLanes independent
  // sums (one chain would wait on each addition), it vectorises with the product.
  constexpr int64_t kLanes = 16;
  acc_t probe[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      out[k + j] = wrapping_mul(v, in[k + j]);
      if constexpr (CheckFinite) {
        probe[j] += static_cast<acc_t>(in[k + j]) * acc_t(0);
      }
    }
  }
  for (; k < n; ++k) {
    out[k] = wrapping_mul(v, in[k]);
    if constexpr (CheckFinite) {
      probe[0] += static_cast<acc_t>(in[k]) * acc_t(0);
    }
  }
  if constexpr (CheckFinite) {
    for (int64_t j = 0; j < kLanes; ++j) {
      if (probe[j] != acc_t(0)) {
        *finite = false;
      }
    }
  }
}

// out = v * in over [0, n) in parallel; with CheckFinite, also whether every in[k] is
// finite.
template <typename scalar_t, bool CheckFinite>
void scale_pass(const scalar_t* in, scalar_t v, scalar_t* out, int64_t n, bool* all_finite) {
  std::atomic<bool> finite{true};
  at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    bool block_finite = true;
    scale_block<scalar_t, CheckFinite>(in + begin, v, out + begin, end - begin, &block_finite);
    if (!block_finite) {
      finite.store(false, std::memory_order_relaxed);
    }
  });
  if (all_finite != nullptr) {
    *all_finite = finite.load();
  }
}

at::Tensor scale_cpu(const at::Tensor& self_, const at::Tensor& value) {
  check_scale_args(self_, value);
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "scale_cpu", [&] {
    scale_pass<scalar_t, false>(self.const_data_ptr<scalar_t>(), value.item<scalar_t>(),
                                out.data_ptr<scalar_t>(), self.numel(), nullptr);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> scale_finite_cpu(const at::Tensor& self_,
                                                    const at::Tensor& value) {
  check_scale_args(self_, value, "tensortools.scale_finite");
  const at::Tensor self = self_.contiguous();
  at::Tensor out = allocate_output(self);
  bool finite = true;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "scale_finite_cpu", [&] {
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    const scalar_t v = value.item<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    if constexpr (std::is_integral_v<scalar_t>) {
      scale_pass<scalar_t, false>(in, v, o, self.numel(), nullptr);  // always finite
    } else {
      scale_pass<scalar_t, true>(in, v, o, self.numel(), &finite);
    }
  });
  return {out, at::scalar_tensor(finite, all_finite_options(self))};
}

}  // namespace
}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("add_diagonal", &tensortools::scalar_ops::add_diagonal_cpu);
  m.impl("scale", &tensortools::scalar_ops::scale_cpu);
  m.impl("scale_finite", &tensortools::scalar_ops::scale_finite_cpu);
}
