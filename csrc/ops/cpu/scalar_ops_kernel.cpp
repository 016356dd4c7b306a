// ScalarTensor kernels on the CPU: one parallel pass each over contiguous rows.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "../scalar_ops.h"

namespace tensortools::scalar_ops {
namespace {

at::Tensor add_diagonal_cpu(const at::Tensor& self_, const at::Tensor& value) {
  check_add_diagonal_args(self_, value);
  const at::Tensor self = self_.contiguous();
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  const int64_t n = self.size(-1);
  const int64_t rows = n == 0 ? 0 : self.numel() / n;  // batch * n
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "add_diagonal_cpu",
                             [&] {
    const scalar_t v = value.item<scalar_t>();
    // Adding zero off the diagonal (rather than copying) matches the dense sum bit for bit:
    // -0.0 + 0 is +0.0.
    const scalar_t zero = scalar_t(0);
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, n));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* src = in + r * n;
        scalar_t* dst = o + r * n;
        for (int64_t j = 0; j < n; ++j) {
          dst[j] = static_cast<scalar_t>(src[j] + zero);
        }
        const int64_t i = r % n;
        dst[i] = static_cast<scalar_t>(src[i] + v);
      }
    });
  });
  return out;
}

at::Tensor scale_cpu(const at::Tensor& self_, const at::Tensor& value) {
  check_scale_args(self_, value);
  const at::Tensor self = self_.contiguous();
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "scale_cpu", [&] {
    const scalar_t v = value.item<scalar_t>();
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, self.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        o[k] = static_cast<scalar_t>(v * in[k]);
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_IMPL(tensortools, CPU, m) {
  m.impl("add_diagonal", &tensortools::scalar_ops::add_diagonal_cpu);
  m.impl("scale", &tensortools::scalar_ops::scale_cpu);
}
