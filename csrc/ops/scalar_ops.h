// Kernels behind ScalarTensor's structured handlers (a ScalarTensor is value * I_N):
//   add_diagonal(input, value) = input + value * I over the last two dimensions, in one pass;
//   scale(input, value)        = value * input, in one pass (value * I @ T and T @ value * I);
//   scale_finite(input, value) = (value * input, whether every element of input is finite),
//                               still one pass: value * I @ T equals value * T only when T
//                               is finite, and this tells the caller so without a second
//                               pass over T.
// `value` is a 0-dimensional tensor of input's dtype.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace tensortools::scalar_ops {

// The dtypes the kernels accept: every real type torch computes in.
inline constexpr at::ScalarType kDtypes[] = {at::kFloat,    at::kDouble, at::kHalf,
                                             at::kBFloat16, at::kByte,   at::kChar,
                                             at::kShort,    at::kInt,    at::kLong};

void check_add_diagonal_args(const at::Tensor& input, const at::Tensor& value);
void check_scale_args(const at::Tensor& input, const at::Tensor& value,
                      const char* op = "tensortools.scale");

// The outputs, allocated here for every backend's kernel and the meta kernel alike: a
// contiguous tensor of input's shape and dtype, and (scale_finite) a 0-d bool tensor.
at::Tensor allocate_output(const at::Tensor& input);
at::TensorOptions all_finite_options(const at::Tensor& input);

}  // namespace tensortools::scalar_ops
