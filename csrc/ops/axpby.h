// axpby(x, y, alpha, beta) = alpha * x + beta * y in one pass, broadcasting as torch does.
// The result is contiguous, of the broadcast shape of x and y, on every backend.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>

namespace tensortools::axpby {

void check_args(const at::Tensor& x, const at::Tensor& y, const at::Scalar& alpha,
                const at::Scalar& beta, c10::ArrayRef<at::ScalarType> allowed);

// The output, allocated here for every backend's kernel and the meta kernel alike.
at::Tensor allocate_output(const at::Tensor& x, const at::Tensor& y);

}  // namespace tensortools::axpby
