// axpby(x, y, alpha, beta) = alpha * x + beta * y in one pass, broadcasting as torch does.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace tensortools::axpby {

void check_args(const at::Tensor& x, const at::Tensor& y, c10::ArrayRef<at::ScalarType> allowed);

}  // namespace tensortools::axpby
