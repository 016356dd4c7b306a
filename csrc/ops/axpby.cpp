// axpby: schema and argument checks. Kernels live in cpu/ and cuda/.
#include "axpby.h"

#include <torch/library.h>

#include "../checks.h"

namespace tensortools::axpby {

void check_args(const at::Tensor& x, const at::Tensor& y, c10::ArrayRef<at::ScalarType> allowed) {
  checks::common("tensortools.axpby", {Arg{x, "x"}, Arg{y, "y"}}, allowed);
}

}  // namespace tensortools::axpby

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("axpby(Tensor x, Tensor y, Scalar alpha, Scalar beta) -> Tensor");
}
