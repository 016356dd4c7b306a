// axpby on the CPU: one TensorIterator pass (broadcasting, any input strides, parallel)
// into the contiguous output, with a contiguous inner loop the compiler vectorises.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../axpby.h"

namespace tensortools::axpby {
namespace {

at::Tensor axpby_cpu(const at::Tensor& x, const at::Tensor& y, const at::Scalar& alpha,
                     const at::Scalar& beta) {
  check_args(x, y, alpha, beta, kCpuFloatingTypes);
  at::Tensor out = allocate_output(x, y);
  auto iter =
      at::TensorIteratorConfig().add_output(out).add_const_input(x).add_const_input(y).build();
  AT_DISPATCH_FLOATING_TYPES(iter.common_dtype(), "axpby_cpu", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    // Rounded like torch rounds a Python number for this dtype (1e300 is inf in float).
    const opmath_t a = static_cast<opmath_t>(alpha.toDouble());
    const opmath_t b = static_cast<opmath_t>(beta.toDouble());
    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
      constexpr int64_t s = sizeof(scalar_t);
      if (strides[0] == s && strides[1] == s && strides[2] == s) {
        auto* o = reinterpret_cast<scalar_t*>(data[0]);
        const auto* px = reinterpret_cast<const scalar_t*>(data[1]);
        const auto* py = reinterpret_cast<const scalar_t*>(data[2]);
        for (int64_t i = 0; i < n; ++i) {
          o[i] = static_cast<scalar_t>(a * opmath_t(px[i]) + b * opmath_t(py[i]));
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const auto xv = *reinterpret_cast<const scalar_t*>(data[1] + i * strides[1]);
        const auto yv = *reinterpret_cast<const scalar_t*>(data[2] + i * strides[2]);
        *reinterpret_cast<scalar_t*>(data[0] + i * strides[0]) =
            static_cast<scalar_t>(a * opmath_t(xv) + b * opmath_t(yv));
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace tensortools::axpby

TORCH_LIBRARY_IMPL(tensortools, CPU, m) { m.impl("axpby", &tensortools::axpby::axpby_cpu); }
