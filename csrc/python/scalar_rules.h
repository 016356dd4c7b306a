// The arithmetic and range rules of ScalarTensor's exact answers, defined once in C and
// exported to Python (scalar_whole_sum, scalar_frobenius, scalar_repeated, scalar_in_range,
// scalar_number_passes, scalar_lapack_safe, scalar_probe, scalar_probed_pair): the Python
// handlers call them for every device, the compiled path (scalar_dispatch.cpp) for CPU
// pairs. See Note [ScalarTensor's exact answers] in docs/design.md.
#pragma once

#include <torch/extension.h>

#include <cstdint>

#include "scalar_values.h"

namespace tensortools::python::scalar {

// The kinds of call of the compiled path (exported as scalar_fast_codes: Python's
// FastCode, tensortools/types/scalar/fast_path.py).
enum Code : long {
  kElementwise = 1,
  kSum = 2,
  kFrobenius = 3,
  kFlagged = 4,
  kEigvals = 5,
  kEigvalsh = 6,
  kSvdvals = 7,
  kAdd = 8,
  kSub = 9,
  kMul = 10,
  kDiv = 11,
  kMatmul = 12,
  kScale = 13,
  kAddDiagonal = 14,
  kAxpby = 15,
  kLltm = 16,
  kGraphConv = 17
};

// SUM (reductions' whole sum): N * value, in int64 for bool and integers (wrapping around
// as the dense sum does), else in the dtype; nullptr without an error set where a
// floating total lies within a factor 4 of the dtype's largest number (the order of the
// dense additions decides there between a number and infinity) or the pair cannot be
// read here (the dense call then answers).
PyObject* whole_sum(Count n, const at::Tensor& pair);

// Whether a magnitude the dense call computes on the way (a sum, a sum of squares) is 0
// or between 4 * tiny and largest / 4.
// See Note [ScalarTensor's exact answers] in docs/design.md.
bool in_range(double x, double largest, double tiny);

// FROBENIUS (closed_forms' whole-matrix norm): sqrt(N) * |value| in the dtype's real
// dtype; nullptr without an error set where the dense sum of squares could leave the
// range at either end (or the pair cannot be read here).
PyObject* frobenius(Count n, const at::Tensor& pair);

// Whether a nonzero finite number x (an int or a float) that an elementwise call passes
// on goes to the function on the pair as it is: 1 or 0; -1 with an error set.
// See Note [ScalarTensor's exact answers] in docs/design.md.
int number_passes(PyObject* x, const at::Tensor& pair);

// Whether the dense LAPACK routines (det, inverse; with `usable`, also the eigenvalue,
// Cholesky and solve routines) treat value * I exactly.
// See Note [ScalarTensor's exact answers] in docs/design.md.
bool lapack_safe(const at::Tensor& pair, bool usable);

// EIGVALS, EIGVALSH, SVDVALS (linalg's eigenvalues, for N > 0 and a value lapack_safe
// finds usable): N copies of the value, as complex (eigvals), of its real part (eigvalsh)
// or of its modulus (svdvals); nullptr without an error set for any other (the Python
// path then leaves it to LAPACK).
PyObject* repeated(long code, int64_t n, const at::Tensor& pair);

// Adds scalar_fast_codes and the scalar_* rules above to the module.
void add_scalar_rules(pybind11::module_& m);

}  // namespace tensortools::python::scalar
