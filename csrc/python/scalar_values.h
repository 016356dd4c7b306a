// A ScalarTensor's pair as its compiled path reads it, and the tensors and instances that
// path makes: shared by the dispatch (scalar_dispatch.cpp, scalar_binary.cpp) and the rules
// exported to Python (scalar_rules.cpp).
#pragma once

#include <torch/extension.h>

#include <complex>
#include <cstdint>

namespace tensortools::python::scalar {

// Interned names, and the empty tuple object.__new__ is called with (set by
// add_scalar_dispatch).
extern PyObject* s_n;     // "N"
extern PyObject* s_pair;  // "_pair"
extern PyObject* g_empty;

// A new instance of `klass` holding N and the pair, as ScalarTensor._from_pair makes it.
PyObject* make(PyObject* klass, PyObject* n, PyObject* pair);

// An entry of a 1-D CPU tensor, for the dtypes the fast path takes: as a complex double
// (floating and complex dtypes; bool and integers too, as doubles) and, for bool and the
// integer dtypes, exactly as an int64 in *integer. false for any other dtype, and for a
// tensor with its conjugate or negative bit set (its memory holds the other number).
bool entry(const at::Tensor& t, int64_t i, std::complex<double>* value, int64_t* integer);

// The largest finite number and the smallest normal one of a floating or complex dtype's
// real part (torch.finfo's max and tiny); false for any other dtype.
bool limits(at::ScalarType dtype, double* largest, double* tiny);

bool floating_or_complex(at::ScalarType dtype);

// Entry i of a pair on any device (see entry; a lazy conjugate or negation is resolved);
// false where there is nothing to read (the meta device, a pair that is not a 1-D strided
// tensor of more than i entries: an instance someone took apart) or the dtype is not one
// entry reads.
bool pair_entry(const at::Tensor& pair, int64_t i, std::complex<double>* value, int64_t* integer);

// A new 0-d tensor holding number, converted to options' dtype as fill_ converts it (and
// at::full, which runs fill_): written directly, without fill_'s TensorIterator, on the
// CPU (and copied to options' device from there).
PyObject* number(const c10::Scalar& number, const at::TensorOptions& options);

// N as the rules use it: N mod 2^64 for integer sums (which wrap around as int64 does) and
// N as a double (rounded as Python's int * float rounds it).
struct Count {
  uint64_t wrapped;
  double real;
  bool zero;
};

inline Count count(int64_t n) { return {static_cast<uint64_t>(n), static_cast<double>(n), n == 0}; }

// The probe an elementwise function runs on in place of the pair: the pair repeated
// kProbeCopies times, so that torch's vector loop computes its first pair and its scalar
// loop its last. See Note [ScalarTensor's exact answers] in docs/design.md.
constexpr int64_t kProbeCopies = 65;

at::Tensor probe_of(const at::Tensor& pair);

// The pair of a function's result on the probe, where its answer is value * I for every
// N whichever loop computes each entry: both loops gave the same bits, and the
// off-diagonal entry is 0. Undefined otherwise (the dense call answers).
at::Tensor probed_pair(const at::Tensor& result);

}  // namespace tensortools::python::scalar
