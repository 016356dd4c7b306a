// Schemas, argument checks, output allocation and meta kernels of the ScalarTensor
// kernels. The CPU and CUDA kernels live in cpu/ and cuda/.
#include "scalar_ops.h"

#include <ATen/ATen.h>
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
  TORCH_CHECK_VALUE(input.dim() >= 2 && input.sym_size(-1) == input.sym_size(-2), op,
                    ": 'input' must be a square matrix or a batch of them (..., N, N), got "
                    "shape ",
                    input.sym_sizes());
}

void check_scale_args(const at::Tensor& input, const at::Tensor& value, const char* op) {
  check_value(op, input, value);
}

at::Tensor allocate_output(const at::Tensor& input) {
  return at::empty_symint(input.sym_sizes(), input.options());
}

at::TensorOptions all_finite_options(const at::Tensor& input) {
  return input.options().dtype(at::kBool);
}

namespace {

// The meta kernels: the checks and the allocation of the CPU and CUDA kernels, no maths.
at::Tensor add_diagonal_meta(const at::Tensor& input, const at::Tensor& value) {
  check_add_diagonal_args(input, value);
  return allocate_output(input);
}

at::Tensor scale_meta(const at::Tensor& input, const at::Tensor& value) {
  check_scale_args(input, value);
  return allocate_output(input);
}

std::tuple<at::Tensor, at::Tensor> scale_finite_meta(const at::Tensor& input,
                                                     const at::Tensor& value) {
  check_scale_args(input, value, "tensortools.scale_finite");
  return {allocate_output(input), at::empty({}, all_finite_options(input))};
}

}  // namespace
}  // namespace tensortools::scalar_ops

TORCH_LIBRARY_IMPL(tensortools, Meta, m) {
  m.impl("add_diagonal", &tensortools::scalar_ops::add_diagonal_meta);
  m.impl("scale", &tensortools::scalar_ops::scale_meta);
  m.impl("scale_finite", &tensortools::scalar_ops::scale_finite_meta);
}

TORCH_LIBRARY_FRAGMENT(tensortools, m) {
  m.def("add_diagonal(Tensor input, Tensor value) -> Tensor");
  m.def("scale(Tensor input, Tensor value) -> Tensor");
  m.def("scale_finite(Tensor input, Tensor value) -> (Tensor out, Tensor all_finite)");
}
