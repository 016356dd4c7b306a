// axpby: schema and argument checks. Kernels live in cpu/ and cuda/.
#include "axpby.h"

#include <torch/library.h>

#include <algorithm>

#include "../checks.h"

namespace tensortools::axpby {

void check_args(const at::Tensor& x, const at::Tensor& y, c10::ArrayRef<at::ScalarType> allowed) {
  checks::common("tensortools.axpby", {Arg{x, "x"}, Arg{y, "y"}}, allowed);
  // Trailing dimensions pairwise equal, or one of them 1 (torch's broadcasting rule).
  for (int64_t i = 1; i <= std::min(x.dim(), y.dim()); ++i) {
    const int64_t a = x.size(-i), b = y.size(-i);
    TORCH_CHECK_VALUE(a == b || a == 1 || b == 1,
                      "tensortools.axpby: 'x' and 'y' must broadcast together, got shapes ",
                      x.sizes(), " and ", y.sizes());
  }
}

}  // namespace tensortools::axpby

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("axpby(Tensor x, Tensor y, Scalar alpha, Scalar beta) -> Tensor");
}
