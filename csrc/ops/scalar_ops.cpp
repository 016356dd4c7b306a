// Schemas and argument checks of the ScalarTensor kernels. Kernels live in cpu/ and cuda/.
#include "scalar_ops.h"

#include <torch/library.h>

#include "../checks.h"

namespace tensortools::scalar_ops {

namespace {

void check_value(const char* op, const at::Tensor& input, const at::Tensor& value) {
  const Arg a_input{input, "input"}, a_value{value, "value"};
  checks::common(op, {a_input, a_value}, kDtypes);
  checks::dim(op, a_value, 0, "a single number");
}

}  // namespace

void check_add_diagonal_args(const at::Tensor& input, const at::Tensor& value) {
  constexpr const char* op = "tensortools.add_diagonal";
  check_value(op, input, value);
  TORCH_CHECK_VALUE(input.dim() >= 2 && input.size(-1) == input.size(-2), op,
                    ": 'input' must be a square matrix or a batch of them (..., N, N), got "
                    "shape ",
                    input.sizes());
}

void check_scale_args(const at::Tensor& input, const at::Tensor& value, const char* op) {
  check_value(op, input, value);
}

}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("add_diagonal(Tensor input, Tensor value) -> Tensor");
  m.def("scale(Tensor input, Tensor value) -> Tensor");
  m.def("scale_finite(Tensor input, Tensor value) -> (Tensor out, Tensor all_finite)");
}
