// Schemas and argument checks of the ScalarTensor kernels. Kernels live in cpu/ and cuda/.
#include "scalar_ops.h"

#include <torch/library.h>

#include "../checks.h"

namespace tensortools::scalar_ops {

namespace {

void check_value(const char* op, const at::Tensor& self, const at::Tensor& value) {
  const Arg a_self{self, "self"}, a_value{value, "value"};
  checks::common(op, {a_self, a_value}, kDtypes);
  checks::dim(op, a_value, 0, "a single number");
}

}  // namespace

void check_add_diagonal_args(const at::Tensor& self, const at::Tensor& value) {
  constexpr const char* op = "tensortools.add_diagonal";
  check_value(op, self, value);
  TORCH_CHECK_VALUE(self.dim() >= 2 && self.size(-1) == self.size(-2), op,
                    ": 'self' must be a square matrix or a batch of them (..., N, N), got "
                    "shape ",
                    self.sizes());
}

void check_scale_args(const at::Tensor& self, const at::Tensor& value, const char* op) {
  check_value(op, self, value);
}

}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("add_diagonal(Tensor self, Tensor value) -> Tensor");
  m.def("scale(Tensor self, Tensor value) -> Tensor");
  m.def("scale_finite(Tensor self, Tensor value) -> (Tensor out, Tensor all_finite)");
}
