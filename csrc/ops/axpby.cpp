// axpby: schema, argument checks, output allocation and the meta kernel. The CPU and CUDA
// kernels live in cpu/ and cuda/.
#include "axpby.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <utility>

#include "../checks.h"

namespace tensortools::axpby {

void check_args(const at::Tensor& x, const at::Tensor& y, const at::Scalar& alpha,
                const at::Scalar& beta, c10::ArrayRef<at::ScalarType> allowed) {
  checks::common("tensortools.axpby", {Arg{x, "x"}, Arg{y, "y"}}, allowed);
  for (const auto& [scalar, name] : {std::pair{&alpha, "alpha"}, std::pair{&beta, "beta"}}) {
    TORCH_CHECK_TYPE(!scalar->isComplex(), "tensortools.axpby: '", name,
                     "' must be a real number, got ", *scalar);
  }
  // Trailing dimensions pairwise equal, or one of them 1 (torch's broadcasting rule).
  for (int64_t i = 1; i <= std::min(x.dim(), y.dim()); ++i) {
    const c10::SymInt a = x.sym_size(-i), b = y.sym_size(-i);
    TORCH_CHECK_VALUE(a == b || a == 1 || b == 1,
                      "tensortools.axpby: 'x' and 'y' must broadcast together, got shapes ",
                      x.sym_sizes(), " and ", y.sym_sizes());
  }
}

at::Tensor allocate_output(const at::Tensor& x, const at::Tensor& y) {
  return at::empty_symint(at::infer_size_symdimvector(x.sym_sizes(), y.sym_sizes()), x.options());
}

namespace {

at::Tensor axpby_meta(const at::Tensor& x, const at::Tensor& y, const at::Scalar& alpha,
                      const at::Scalar& beta) {
  check_args(x, y, alpha, beta, floating_types_for(x.device()));
  return allocate_output(x, y);
}

}  // namespace
}  // namespace tensortools::axpby

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("axpby(Tensor x, Tensor y, Scalar alpha, Scalar beta) -> Tensor");
}

TORCH_LIBRARY_IMPL(tensortools, Meta, m) { m.impl("axpby", &tensortools::axpby::axpby_meta); }
