// ScalarTensor.__torch_function__ in C for its most common calls.
// See Note [The compiled paths] in docs/design.md.
//
// The kinds of call (Code below, exported as scalar_fast_codes: Python's FastCode) and the
// functions of each are listed in one place, tensortools/types/scalar/fast_path.py:
//   ELEMENTWISE (FLAGGED for one with the flags inplace or training, which must be False
//      or None and passed by keyword, as torch's functional forms pass them)
//      an elementwise function of one ScalarTensor, with no other arguments than numbers,
//      None and False (torch.abs(d), torch.sin(d), d.relu(), F.relu(d), which passes
//      inplace=False, -d, d > 0, torch.clamp(d, -1, 1), d ** 2): the function on the probe
//      (the pair [value, 0] repeated, see probe_of), structured when torch's vector and
//      scalar loops agree on it and the off-diagonal entry stays 0 (scalar/elementwise.py);
//   SUM  the whole matrix's sum, torch.sum(d) / d.sum();
//   FROBENIUS  its Frobenius norm, torch.linalg.norm(d) / d.norm() and vector_norm /
//      matrix_norm without arguments (torch.norm(d) passes its defaults by keyword, and
//      takes the Python path);
//   EIGVALS, EIGVALSH, SVDVALS  torch.linalg.eigvals(d), eigvalsh(d), svdvals(d) without
//      further arguments: N copies of a number;
//   ADD, SUB, MUL, DIV, MATMUL  arithmetic.py's calls of two operands (d + e, d - e, d * e
//      with alpha= for add and sub, d * 2, 2 * d, d / 2 with rounding_mode=, d @ e), for
//      ScalarTensors of one N (any N) or, for mul and div, one and a Python number: see
//      arithmetic() below.
// The arithmetic of SUM, FROBENIUS and the eigenvalues, and the range rules the Python
// handlers share (probe_of, probed_pair, in_range, number_passes, lapack_safe), are
// defined here once and exported to Python (scalar_probe, scalar_probed_pair,
// scalar_whole_sum, scalar_frobenius, scalar_repeated, scalar_in_range,
// scalar_number_passes, scalar_lapack_safe): the Python handlers call them for every
// device, this path for CPU pairs (see Note [ScalarTensor's exact answers] in
// docs/design.md). Every other call, and every case these leave out (other arguments,
// N <= 1 or beyond int64, a device other than the CPU, a result whose off-diagonal entry
// is not 0, any error), goes to the class's Python path (cls._python_torch_function).
//
// Python code can run in the middle of a call here too.
// See Note [Python code inside a C call] in docs/design.md.
//
// What it reads from a class: cls._fast, a FastRecord (result_class, codes), whose fields
// tensortools/types/scalar/tensor.py documents.
#include "scalar_dispatch.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace tensortools::python {
namespace {

// Interned names, and the empty tuple object.__new__ is called with.
PyObject* s_fast = nullptr;         // "_fast": the class's record
PyObject* s_python_path = nullptr;  // "_python_torch_function"
PyObject* s_n = nullptr;            // "N"
PyObject* s_pair = nullptr;         // "_pair"
PyObject* g_empty = nullptr;

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
  kMatmul = 12
};

// The codes by the names Python's FastCode gives them.
constexpr std::pair<const char*, long> kCodeNames[] = {{"ELEMENTWISE", kElementwise},
                                                       {"SUM", kSum},
                                                       {"FROBENIUS", kFrobenius},
                                                       {"FLAGGED", kFlagged},
                                                       {"EIGVALS", kEigvals},
                                                       {"EIGVALSH", kEigvalsh},
                                                       {"SVDVALS", kSvdvals},
                                                       {"ADD", kAdd},
                                                       {"SUB", kSub},
                                                       {"MUL", kMul},
                                                       {"DIV", kDiv},
                                                       {"MATMUL", kMatmul}};

// The torch functions the arithmetic handlers call (torch.add, sub, mul, div), by code.
PyObject* g_arithmetic[4] = {nullptr, nullptr, nullptr, nullptr};

// The most positional arguments a call on this path may have (clamp(d, min, max) has 3).
constexpr Py_ssize_t kMostArguments = 8;

PyObject* python_path(PyObject* const* argv, Py_ssize_t argc) {
  return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);  // cls.<name>(...)
}

template <typename T>
void read(const T& x, std::complex<double>* value, int64_t* integer) {
  if constexpr (c10::is_complex<T>::value) {
    *value = std::complex<double>(x.real(), x.imag());
  } else if constexpr (std::is_integral_v<T>) {
    *integer = static_cast<int64_t>(x);
    *value = static_cast<double>(x);
  } else {
    *value = static_cast<double>(x);
  }
}

// An entry of a 1-D CPU tensor, for the dtypes the fast path takes: as a complex double
// (floating and complex dtypes; bool and integers too, as doubles) and, for bool and the
// integer dtypes, exactly as an int64 in *integer. false for any other dtype, and for a
// tensor with its conjugate or negative bit set (its memory holds the other number).
bool entry(const at::Tensor& t, int64_t i, std::complex<double>* value, int64_t* integer) {
  switch (t.scalar_type()) {
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kUInt16:
    case at::kUInt32:
    case at::kUInt64:
    case at::kHalf:
    case at::kBFloat16:
    case at::kFloat:
    case at::kDouble:
    case at::kComplexFloat:
    case at::kComplexDouble:
      break;
    default:
      return false;
  }
  if (t.is_conj() || t.is_neg()) return false;  // (a lazy conjugate or negation: not read)
  const int64_t offset = i * t.stride(0);
  // (unsigned: as the int64 of the same bits mod 2^64, which integer sums wrap around in)
  switch (t.scalar_type()) {
    case at::kUInt16:
      read(static_cast<const uint16_t*>(t.const_data_ptr())[offset], value, integer);
      return true;
    case at::kUInt32:
      read(static_cast<const uint32_t*>(t.const_data_ptr())[offset], value, integer);
      return true;
    case at::kUInt64:
      read(static_cast<const uint64_t*>(t.const_data_ptr())[offset], value, integer);
      return true;
    default:
      break;
  }
  if (t.scalar_type() == at::kBool) {
    // a bool's byte as torch reads it: any nonzero byte is True (1)
    *integer = static_cast<const uint8_t*>(t.const_data_ptr())[offset] != 0 ? 1 : 0;
    *value = static_cast<double>(*integer);
    return true;
  }
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(
      at::kHalf, at::kBFloat16, t.scalar_type(), "scalar_dispatch_entry",
      [&] { read(t.const_data_ptr<scalar_t>()[offset], value, integer); });
  return true;
}

// The largest finite number and the smallest normal one of a floating or complex dtype's
// real part (torch.finfo's max and tiny); false for any other dtype.
template <typename T>
void limits_of(double* largest, double* tiny) {
  *largest = static_cast<double>(std::numeric_limits<T>::max());
  *tiny = static_cast<double>(std::numeric_limits<T>::min());
}

bool limits(at::ScalarType dtype, double* largest, double* tiny) {
  switch (c10::toRealValueType(dtype)) {
    case at::kHalf:
      limits_of<c10::Half>(largest, tiny);
      return true;
    case at::kBFloat16:
      limits_of<c10::BFloat16>(largest, tiny);
      return true;
    case at::kFloat:
      limits_of<float>(largest, tiny);
      return true;
    case at::kDouble:
      limits_of<double>(largest, tiny);
      return true;
    case at::kFloat8_e5m2:
      limits_of<c10::Float8_e5m2>(largest, tiny);
      return true;
    case at::kFloat8_e4m3fn:
      limits_of<c10::Float8_e4m3fn>(largest, tiny);
      return true;
    case at::kFloat8_e5m2fnuz:
      limits_of<c10::Float8_e5m2fnuz>(largest, tiny);
      return true;
    case at::kFloat8_e4m3fnuz:
      limits_of<c10::Float8_e4m3fnuz>(largest, tiny);
      return true;
    default:
      return false;
  }
}

bool floating_or_complex(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat ||
         dtype == at::kDouble || dtype == at::kComplexFloat || dtype == at::kComplexDouble;
}

// A new instance of `klass` holding N and the pair, as ScalarTensor._from_pair makes it.
PyObject* make(PyObject* klass, PyObject* n, PyObject* pair) {
  auto* type = reinterpret_cast<PyTypeObject*>(klass);
  PyObject* out = type->tp_new(type, g_empty, nullptr);
  if (out == nullptr) return nullptr;
  if (PyObject_SetAttr(out, s_n, n) != 0 || PyObject_SetAttr(out, s_pair, pair) != 0) {
    Py_CLEAR(out);
  }
  return out;
}

// Entry i of a pair on any device (see entry; a lazy conjugate or negation is resolved);
// false where there is nothing to read (the meta device, a pair that is not a 1-D strided
// tensor of more than i entries: an instance someone took apart) or the dtype is not one
// entry reads.
bool pair_entry(const at::Tensor& pair, int64_t i, std::complex<double>* value, int64_t* integer) {
  if (!pair.defined() || pair.is_meta() || pair.layout() != at::kStrided || pair.dim() != 1 ||
      pair.size(0) <= i) {
    return false;
  }
  if (pair.is_cpu() && !pair.is_conj() && !pair.is_neg()) return entry(pair, i, value, integer);
  return entry(pair.resolve_conj().resolve_neg().to(at::kCPU), i, value, integer);
}

// A new 0-d tensor holding number, converted to options' dtype as fill_ converts it (and
// at::full, which runs fill_): written directly, without fill_'s TensorIterator, on the
// CPU (and copied to options' device from there).
PyObject* number(const c10::Scalar& number, const at::TensorOptions& options) {
  at::Tensor t = at::empty({}, options.device(at::kCPU));
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(
      at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "scalar_dispatch_number",
      [&] { *t.mutable_data_ptr<scalar_t>() = number.to<scalar_t>(); });
  if (options.device() != t.device()) t = t.to(options.device());
  return THPVariable_Wrap(std::move(t));
}

// N as the rules use it: N mod 2^64 for integer sums (which wrap around as int64 does) and
// N as a double (rounded as Python's int * float rounds it).
struct Count {
  uint64_t wrapped;
  double real;
  bool zero;
};

Count count(int64_t n) { return {static_cast<uint64_t>(n), static_cast<double>(n), n == 0}; }

// The probe an elementwise function runs on in place of the pair: the pair repeated
// kProbeCopies times, so that torch's vector loop computes its first pair and its scalar
// loop its last. See Note [ScalarTensor's exact answers] in docs/design.md.
constexpr int64_t kProbeCopies = 65;

at::Tensor probe_of(const at::Tensor& pair) {
  if (!pair.is_cpu() || pair.dim() != 1 || pair.size(0) != 2 || pair.is_conj() || pair.is_neg()) {
    return pair.expand({kProbeCopies, 2}).contiguous().view({2 * kProbeCopies});
  }
  // (written directly: repeat and copy cost more than the function called on the probe)
  const at::Tensor source = pair.contiguous();
  at::Tensor probe = at::empty({2 * kProbeCopies}, pair.options());
  const auto size = static_cast<size_t>(pair.element_size());
  const auto* from = static_cast<const char*>(source.const_data_ptr());
  auto* to = static_cast<char*>(probe.mutable_data_ptr());
  for (int64_t i = 0; i < kProbeCopies; ++i) std::memcpy(to + 2 * i * size, from, 2 * size);
  return probe;
}

// The pair of a function's result on the probe, where its answer is value * I for every
// N whichever loop computes each entry: both loops gave the same bits, and the
// off-diagonal entry is 0. Undefined otherwise (the dense call answers).
at::Tensor probed_pair(const at::Tensor& result) {
  if (result.layout() != at::kStrided || result.dim() != 1 || result.numel() != 2 * kProbeCopies ||
      result.is_meta()) {
    return {};
  }
  at::Tensor ends = result;  // the first pair and the last, read here on the CPU
  int64_t last = 2 * kProbeCopies - 2;
  if (!result.is_cpu() || !result.is_contiguous() || result.is_conj() || result.is_neg()) {
    ends = at::cat({result.narrow(0, 0, 2), result.narrow(0, last, 2)})
               .resolve_conj()
               .resolve_neg()
               .to(at::kCPU)
               .contiguous();
    last = 2;
  }
  const auto size = static_cast<size_t>(ends.element_size());
  const auto* bytes = static_cast<const char*>(ends.const_data_ptr());
  std::complex<double> off;
  int64_t integer = 0;
  if (std::memcmp(bytes, bytes + last * size, 2 * size) != 0 || !entry(ends, 1, &off, &integer) ||
      off != std::complex<double>(0.0, 0.0)) {  // (NaN is not 0)
    return {};
  }
  if (!result.is_cpu()) return result.narrow(0, 2 * kProbeCopies - 2, 2).clone();
  at::Tensor pair = at::empty({2}, result.options());
  std::memcpy(pair.mutable_data_ptr(), bytes + last * size, 2 * size);
  return pair;
}

// Code 1 (scalar_elementwise's handler): func on the probe, with the call's further
// arguments (each one that `passes`); the ScalarTensor x itself where func returns the
// probe as it is (x.float() of a float32 x). nullptr without an error set: the Python path.
PyObject* elementwise(PyObject* klass, PyObject* func, PyObject* args, PyObject* kwargs,
                      PyObject* n, const at::Tensor& pair) {
  PyObject* x = PyTuple_GET_ITEM(args, 0);
  PyObject* probe = THPVariable_Wrap(probe_of(pair));
  if (probe == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* argv[kMostArguments];
  const Py_ssize_t argc = PyTuple_GET_SIZE(args);
  argv[0] = probe;
  for (Py_ssize_t i = 1; i < argc; ++i) argv[i] = PyTuple_GET_ITEM(args, i);
  PyObject* result = PyObject_VectorcallDict(func, argv, argc, kwargs);
  if (result == nullptr) {
    Py_DECREF(probe);
    PyErr_Clear();  // (the Python path runs the call again and raises what it raises)
    return nullptr;
  }
  PyObject* out = nullptr;
  if (result == probe) {
    out = Py_NewRef(x);
  } else if (THPVariable_CheckExact(result)) {
    const at::Tensor& t = THPVariable_Unpack(result);
    if (t.device().is_cpu()) {
      at::Tensor answer = probed_pair(t);
      if (answer.defined()) {
        PyObject* wrapped = THPVariable_Wrap(std::move(answer));
        if (wrapped != nullptr) {
          out = make(klass, n, wrapped);
          Py_DECREF(wrapped);
        }
      }
    }
  }
  Py_DECREF(result);
  Py_DECREF(probe);
  if (out == nullptr) PyErr_Clear();
  return out;
}

// SUM (reductions' whole sum): N * value, in int64 for bool and integers (wrapping around
// as the dense sum does), else in the dtype; nullptr without an error set where a
// floating total lies within a factor 4 of the dtype's largest number (the order of the
// dense additions decides there between a number and infinity) or the pair cannot be
// read here (the dense call then answers).
PyObject* whole_sum(Count n, const at::Tensor& pair) {
  std::complex<double> v;
  int64_t integer = 0;
  if (!pair_entry(pair, 0, &v, &integer)) return nullptr;
  const at::ScalarType dtype = pair.scalar_type();
  if (!floating_or_complex(dtype)) {
    const auto total = n.wrapped * static_cast<uint64_t>(integer);
    return number(static_cast<int64_t>(total), pair.options().dtype(at::kLong));
  }
  if (n.zero) return number(0, pair.options());  // (also for an infinite value)
  double largest, tiny;
  if (!limits(dtype, &largest, &tiny)) return nullptr;
  double totals[2] = {v.real(), v.imag()};
  for (double& total : totals) {
    total = n.real * total + 0.0;  // (+0 for -0: torch's sums start at +0)
    const double size = std::fabs(total);
    if (largest / 4 < size && size < 4 * largest) return nullptr;
    if (size >= 4 * largest) total = std::copysign(INFINITY, total);
  }
  if (c10::isComplexType(dtype)) {
    return number(c10::complex<double>(totals[0], totals[1]), pair.options());
  }
  return number(totals[0], pair.options());
}

// Whether a magnitude the dense call computes on the way (a sum, a sum of squares) is 0
// or between 4 * tiny and largest / 4.
// See Note [ScalarTensor's exact answers] in docs/design.md.
bool in_range(double x, double largest, double tiny) {
  x = std::fabs(x);
  return x == 0 || (4 * tiny <= x && x <= largest / 4);
}

// |v| as Python's abs() gives it for the number tolist() reads: fabs of a real value (a
// NaN keeps its payload), and for a complex one the modulus, infinite where a part is,
// NaN (Python's own) where a part is NaN; false where it overflows (Python's
// OverflowError).
bool modulus(std::complex<double> v, bool complex, double* out) {
  if (!complex) {
    *out = std::fabs(v.real());
    return true;
  }
  if (std::isinf(v.real()) || std::isinf(v.imag())) {
    *out = std::isinf(v.real()) ? std::fabs(v.real()) : std::fabs(v.imag());
    return true;
  }
  if (std::isnan(v.real()) || std::isnan(v.imag())) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  *out = std::hypot(v.real(), v.imag());
  return std::isfinite(*out);
}

// FROBENIUS (closed_forms' whole-matrix norm): sqrt(N) * |value| in the dtype's real
// dtype; nullptr without an error set where the dense sum of squares could leave the
// range at either end (or the pair cannot be read here).
PyObject* frobenius(Count n, const at::Tensor& pair) {
  const at::ScalarType dtype = pair.scalar_type();
  std::complex<double> v;
  int64_t integer = 0;
  double largest, tiny, a;
  if (!floating_or_complex(dtype) || !limits(dtype, &largest, &tiny) ||
      !pair_entry(pair, 0, &v, &integer) || !modulus(v, c10::isComplexType(dtype), &a)) {
    return nullptr;
  }
  const auto options = pair.options().dtype(c10::toRealValueType(dtype));
  if (n.zero || a == 0 || !std::isfinite(a)) return number(n.zero ? 0.0 : a, options);
  // (a square of 0 here underflowed: the dense sum of squares decides between 0 and a
  // tiny number)
  const double square = a * a;
  if (square == 0 ||
      !(in_range(square, largest, tiny) && in_range(n.real * square, largest, tiny))) {
    return nullptr;
  }
  return number(std::sqrt(n.real) * a, options);
}

// Whether a nonzero finite number x (an int or a float) that an elementwise call passes
// on goes to the function on the pair as it is: 1 or 0; -1 with an error set.
// See Note [ScalarTensor's exact answers] in docs/design.md.
int number_passes(PyObject* x, const at::Tensor& pair) {
  c10::Scalar scalar;
  double magnitude;
  if (PyLong_Check(x)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow > 0) {  // (torch takes ints up to 2^64 - 1, as uint64)
      const unsigned long long u = PyLong_AsUnsignedLongLong(x);
      if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
      }
      scalar = c10::Scalar(static_cast<uint64_t>(u));
      magnitude = static_cast<double>(u);
    } else if (overflow < 0) {
      return 0;
    } else {
      if (v == 0) return 1;
      scalar = c10::Scalar(static_cast<int64_t>(v));
      magnitude = std::fabs(static_cast<double>(v));
    }
  } else if (PyFloat_Check(x)) {
    const double v = PyFloat_AS_DOUBLE(x);
    if (v == 0 || !std::isfinite(v)) return 1;
    scalar = c10::Scalar(v);
    magnitude = std::fabs(v);
  } else {
    return 1;
  }
  at::ScalarType dtype;
  try {
    dtype = c10::toRealValueType(at::result_type(pair, scalar));
  } catch (const std::exception&) {
    return 0;  // (no promotion torch has: the dense call's error)
  }
  if (!c10::isFloatingType(dtype)) return 1;
  double largest, tiny;
  if (!limits(dtype, &largest, &tiny)) return 0;
  return tiny <= magnitude && magnitude <= largest ? 1 : 0;
}

// Whether an elementwise call's further argument is one the Python handler passes to the
// function as it is and this file can tell so: an int or a float (see number_passes),
// None, or False. (True is left to the Python path, which reads the flags inplace and
// training; so are strings, dtypes, tensors and other ScalarTensors.)
bool passes(PyObject* x, const at::Tensor& pair) {
  if (x == Py_None || x == Py_False) return true;
  if (PyLong_CheckExact(x) || PyFloat_CheckExact(x)) {
    const int verdict = number_passes(x, pair);
    if (verdict < 0) PyErr_Clear();  // (the Python path decides, and raises)
    return verdict == 1;
  }
  return false;
}

// Whether every argument after the first, positional or keyword, passes. For a function
// with flags (code 4: inplace, training), only keyword arguments, and those flags only
// where they are False or None (the Python handler leaves a set flag to the in-place
// rules; torch's functional forms pass their flags by keyword).
bool all_pass(PyObject* args, PyObject* kwargs, const at::Tensor& pair, bool flagged) {
  if (flagged && PyTuple_GET_SIZE(args) > 1) return false;
  for (Py_ssize_t i = 1; i < PyTuple_GET_SIZE(args); ++i) {
    if (!passes(PyTuple_GET_ITEM(args, i), pair)) return false;
  }
  if (kwargs != nullptr) {
    Py_ssize_t pos = 0;
    PyObject* key;
    PyObject* value;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      if (flagged && value != Py_False && value != Py_None &&
          (!PyUnicode_Check(key) || PyUnicode_CompareWithASCIIString(key, "inplace") == 0 ||
           PyUnicode_CompareWithASCIIString(key, "training") == 0)) {
        return false;
      }
      if (!passes(value, pair)) return false;
    }
  }
  return true;
}

// Whether the dense LAPACK routines (det, inverse; with `usable`, also the eigenvalue,
// Cholesky and solve routines) treat value * I exactly.
// See Note [ScalarTensor's exact answers] in docs/design.md.
bool lapack_safe(const at::Tensor& pair, bool usable) {
  const at::ScalarType dtype = pair.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kComplexFloat &&
      dtype != at::kComplexDouble) {
    return false;
  }
  std::complex<double> v;
  int64_t integer = 0;
  if (!pair_entry(pair, 0, &v, &integer) || !std::isfinite(v.real()) || !std::isfinite(v.imag())) {
    return false;
  }
  double largest, tiny;
  limits(dtype, &largest, &tiny);
  const double modulus = std::hypot(v.real(), v.imag());
  if (modulus != 0 && modulus < tiny) return false;
  return !(usable && c10::isComplexType(dtype) && !in_range(modulus, largest, tiny));
}

// EIGVALS, EIGVALSH, SVDVALS (linalg's eigenvalues, for N > 0 and a value lapack_safe
// finds usable): N copies of the value, as complex (eigvals), of its real part (eigvalsh)
// or of its modulus (svdvals); nullptr without an error set for any other (the Python
// path then leaves it to LAPACK).
PyObject* repeated(long code, int64_t n, const at::Tensor& pair) {
  if (n <= 0 || !lapack_safe(pair, true)) return nullptr;
  std::complex<double> v;
  int64_t integer = 0;
  pair_entry(pair, 0, &v, &integer);
  const at::ScalarType dtype = pair.scalar_type();
  c10::Scalar number;
  at::ScalarType out;
  if (code == kEigvals) {
    number = c10::complex<double>(v.real(), v.imag());
    out = c10::toComplexType(dtype);
  } else {
    number = code == kEigvalsh ? v.real() : std::hypot(v.real(), v.imag());
    out = c10::toRealValueType(dtype);
  }
  return THPVariable_Wrap(at::full({n}, number, pair.options().dtype(out)));
}

// -- ADD, SUB, MUL, DIV, MATMUL: arithmetic.py's handlers of two operands --

// A ScalarTensor operand of class cls this path reads: its N (an int in int64, >= 0) and
// its pair (a plain 1-D CPU tensor of 2 entries), as new references; false (no error
// set) for anything else.
bool operand(PyObject* x, PyObject* cls, PyObject** n, PyObject** pair, int64_t* size) {
  if (Py_TYPE(x) != reinterpret_cast<PyTypeObject*>(cls)) return false;
  *n = PyObject_GetAttr(x, s_n);
  *pair = *n == nullptr ? nullptr : PyObject_GetAttr(x, s_pair);
  if (*pair == nullptr) {
    Py_CLEAR(*n);
    PyErr_Clear();
    return false;
  }
  int overflow = 0;
  const long long v = PyLong_CheckExact(*n) ? PyLong_AsLongLongAndOverflow(*n, &overflow) : -1;
  bool ok = v >= 0 && overflow == 0 && THPVariable_CheckExact(*pair);
  if (ok) {
    const at::Tensor& t = THPVariable_Unpack(*pair);
    ok = t.device().is_cpu() && t.layout() == at::kStrided && t.dim() == 1 && t.numel() == 2;
  }
  if (!ok) {
    PyErr_Clear();
    Py_CLEAR(*n);
    Py_CLEAR(*pair);
    return false;
  }
  *size = v;
  return true;
}

// A Python number as plain_operand takes it as it is (bool, int, float, complex; their
// subclasses are left to the Python path).
bool plain_number(PyObject* x) {
  return PyBool_Check(x) || PyLong_CheckExact(x) || PyFloat_CheckExact(x) ||
         PyComplex_CheckExact(x);
}

// Whether entry 0 of a pair is finite, as common.finite reads it (integers always are).
bool finite_value(const at::Tensor& pair) {
  std::complex<double> v;
  int64_t integer = 0;
  return pair_entry(pair, 0, &v, &integer) && std::isfinite(v.real()) && std::isfinite(v.imag());
}

// A ScalarTensor of size n for result (a new reference, consumed) where make_pair finds
// its pair; nullptr without an error set otherwise.
template <typename MakePair>
PyObject* structured_result(PyObject* klass, PyObject* n, PyObject* result, MakePair make_pair) {
  PyObject* out = nullptr;
  if (result != nullptr && THPVariable_CheckExact(result)) {
    at::Tensor pair = make_pair(THPVariable_Unpack(result));
    if (pair.defined()) {
      PyObject* wrapped = THPVariable_Wrap(std::move(pair));
      if (wrapped != nullptr) {
        out = make(klass, n, wrapped);
        Py_DECREF(wrapped);
      }
    }
  }
  Py_XDECREF(result);
  if (out == nullptr) PyErr_Clear();
  return out;
}

// Whether kwargs holds only the keyword the handler of `code` passes on (alpha for add and
// sub, rounding_mode for div).
bool arithmetic_keywords(long code, PyObject* kwargs) {
  if (kwargs == nullptr) return true;
  const char* allowed = code == kAdd || code == kSub ? "alpha"
                        : code == kDiv               ? "rounding_mode"
                                                     : "";
  Py_ssize_t pos = 0;
  PyObject* key;
  PyObject* value;
  while (PyDict_Next(kwargs, &pos, &key, &value)) {
    if (!PyUnicode_Check(key) || PyUnicode_CompareWithASCIIString(key, allowed) != 0) return false;
  }
  return true;
}

// The handlers of arithmetic.py for the calls of two CPU operands it answers with a
// structured result: add, sub and mul of two ScalarTensors of one N (the torch function on
// their probes), mul of a ScalarTensor and a number in either order and div of a
// ScalarTensor of N > 0 by a number (on its probe, in the call's order), matmul/mm of two
// finite ScalarTensors of one N and one dtype (not bool) whose product is finite (the
// product of their pairs). nullptr without an error set for every other call and case
// (sizes that differ, 0-d tensors, dense operands, an error of torch's): the Python path
// answers, and raises what it raises.
PyObject* arithmetic(PyObject* klass, PyObject* cls, long code, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) != 2 || !arithmetic_keywords(code, kwargs)) return nullptr;
  PyObject* operands[2] = {PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1)};
  PyObject* ns[2] = {nullptr, nullptr};
  PyObject* pairs[2] = {nullptr, nullptr};
  int64_t sizes[2] = {-1, -1};
  bool scalar[2];
  for (int i = 0; i < 2; ++i) {
    scalar[i] = operand(operands[i], cls, &ns[i], &pairs[i], &sizes[i]);
  }
  PyObject* out = nullptr;
  PyObject* probes[2] = {nullptr, nullptr};
  const int d = scalar[0] ? 0 : 1;  // the ScalarTensor whose size the result has
  bool go = false;
  if (scalar[0] && scalar[1]) {
    go = sizes[0] == sizes[1] && (code == kAdd || code == kSub || code == kMul || code == kMatmul);
  } else if (scalar[0] || scalar[1]) {
    go = plain_number(operands[1 - d]) &&
         (code == kMul || (code == kDiv && d == 0 && sizes[0] != 0));
  }
  // (the handlers call torch's functions, which a TorchFunctionMode sees: with one active,
  // this path calls them too)
  const bool modes = at::impl::torch_function_mode_enabled();
  try {
    if (go && code == kMatmul) {
      const at::Tensor& a = THPVariable_Unpack(pairs[0]);
      const at::Tensor& b = THPVariable_Unpack(pairs[1]);
      if (a.scalar_type() == b.scalar_type() && a.scalar_type() != at::kBool && finite_value(a) &&
          finite_value(b)) {
        PyObject* argv[2] = {pairs[0], pairs[1]};
        PyObject* product =
            modes ? PyObject_VectorcallDict(g_arithmetic[kMul - kAdd], argv, 2, nullptr)
                  : THPVariable_Wrap(at::mul(a, b));
        out = structured_result(klass, ns[0], product, [](const at::Tensor& t) {
          return finite_value(t) ? t : at::Tensor();
        });
      }
    } else if (go && scalar[0] && scalar[1] && kwargs == nullptr && !modes) {
      // (torch.add, sub or mul of two plain CPU tensors and no keyword, with no mode to
      // see it: the call torch's binding makes, made here)
      const at::Tensor a = probe_of(THPVariable_Unpack(pairs[0]));
      const at::Tensor b = operands[1] == operands[0] ? a : probe_of(THPVariable_Unpack(pairs[1]));
      at::Tensor result = code == kAdd   ? at::add(a, b)
                          : code == kSub ? at::sub(a, b)
                                         : at::mul(a, b);
      at::Tensor pair = probed_pair(result);
      if (pair.defined()) {
        PyObject* wrapped = THPVariable_Wrap(std::move(pair));
        if (wrapped != nullptr) {
          out = make(klass, ns[0], wrapped);
          Py_DECREF(wrapped);
        }
      }
    } else if (go) {
      PyObject* argv[2];
      bool made = true;
      for (int i = 0; i < 2; ++i) {
        if (scalar[i] && i == 1 && scalar[0] && operands[1] == operands[0]) {
          probes[1] = Py_NewRef(probes[0]);  // (d + d: one probe)
        } else if (scalar[i]) {
          probes[i] = THPVariable_Wrap(probe_of(THPVariable_Unpack(pairs[i])));
        }
        made = made && (!scalar[i] || probes[i] != nullptr);
        argv[i] = scalar[i] ? probes[i] : operands[i];
      }
      if (made) {
        PyObject* result = PyObject_VectorcallDict(g_arithmetic[code - kAdd], argv, 2, kwargs);
        out = structured_result(klass, ns[d], result,
                                [](const at::Tensor& t) { return probed_pair(t); });
      }
    }
  } catch (const std::exception&) {
    out = nullptr;  // (the Python path runs the call again, and raises what it raises)
  }
  if (out == nullptr) PyErr_Clear();
  for (int i = 0; i < 2; ++i) {
    Py_XDECREF(ns[i]);
    Py_XDECREF(pairs[i]);
    Py_XDECREF(probes[i]);
  }
  return out;
}

// The fast path's answer for a call with record (klass, codes), or nullptr: with an error
// set on error, else the Python path.
PyObject* fast(PyObject* record, PyObject* cls, PyObject* func, PyObject* args, PyObject* kwargs) {
  if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2) return nullptr;
  PyObject* klass = PyTuple_GET_ITEM(record, 0);
  PyObject* codes = PyTuple_GET_ITEM(record, 1);
  if (!PyType_Check(klass) || !PyDict_Check(codes)) return nullptr;
  if (args == nullptr || !PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) < 1 ||
      PyTuple_GET_SIZE(args) > kMostArguments ||
      (kwargs != nullptr && !PyDict_CheckExact(kwargs))) {
    return nullptr;
  }
  PyObject* x = PyTuple_GET_ITEM(args, 0);                       // (the caller's tuple holds it)
  PyObject* code_object = PyDict_GetItemWithError(codes, func);  // (func's __eq__ may run)
  if (code_object == nullptr) return nullptr;                    // (an error stays set)
  if (!PyLong_CheckExact(code_object)) return nullptr;  // (a record this file did not make)
  const long code = PyLong_AsLong(code_object);         // (an exact int: no Python code runs)
  if (code == -1 && PyErr_Occurred()) return nullptr;
  if (code >= kAdd && code <= kMatmul) {
    return arithmetic(klass, cls, code, args,
                      kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0 ? kwargs : nullptr);
  }
  if (Py_TYPE(x) != reinterpret_cast<PyTypeObject*>(cls)) return nullptr;
  const bool further =
      PyTuple_GET_SIZE(args) > 1 || (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0);
  if (further && code != kElementwise && code != kFlagged) return nullptr;

  PyObject* own_kwargs = nullptr;  // the call's own keyword arguments (see the file comment)
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    own_kwargs = PyDict_Copy(kwargs);
    if (own_kwargs == nullptr) return nullptr;
  }
  PyObject* n = PyObject_GetAttr(x, s_n);
  PyObject* pair_object = n == nullptr ? nullptr : PyObject_GetAttr(x, s_pair);
  if (pair_object == nullptr) {
    Py_XDECREF(n);
    Py_XDECREF(own_kwargs);
    return nullptr;
  }
  kwargs = own_kwargs;
  PyObject* out = nullptr;
  int overflow = 0;
  const long long size = PyLong_CheckExact(n) ? PyLong_AsLongLongAndOverflow(n, &overflow) : -1;
  if (size >= 0 && overflow == 0 && THPVariable_CheckExact(pair_object)) {
    const at::Tensor& pair = THPVariable_Unpack(pair_object);
    if (pair.device().is_cpu() && pair.layout() == at::kStrided && pair.dim() == 1 &&
        pair.numel() == 2) {
      try {
        if ((code == kElementwise || code == kFlagged) && size >= 2 &&
            (!further || all_pass(args, kwargs, pair, code == kFlagged))) {
          out = elementwise(klass, func, args, kwargs, n, pair);
        } else if (code == kSum) {
          out = whole_sum(count(size), pair);
        } else if (code == kFrobenius) {
          out = frobenius(count(size), pair);
        } else if (code == kEigvals || code == kEigvalsh || code == kSvdvals) {
          out = repeated(code, size, pair);
        }
      } catch (const std::exception&) {
        // (torch's calls above may throw: out of memory and the like) the Python path
        // then runs the call, and raises what it raises
        out = nullptr;
      }
    }
  } else {
    PyErr_Clear();  // (a size beyond int64: the Python path)
  }
  Py_DECREF(n);
  Py_DECREF(pair_object);
  Py_XDECREF(own_kwargs);
  return out;
}

PyObject* scalar_torch_function(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc < 3 || argc > 5) {
    PyErr_SetString(PyExc_TypeError,
                    "scalar_torch_function(cls, func, types, args=(), kwargs=None)");
    return nullptr;
  }
  PyObject* cls = argv[0];
  if (!PyType_Check(cls)) return python_path(argv, argc);
  PyObject* record = PyObject_GetAttr(cls, s_fast);
  if (record == nullptr) return nullptr;
  PyObject* out = fast(record, cls, argv[1], argc > 3 ? argv[3] : nullptr,
                       argc > 4 && argv[4] != Py_None ? argv[4] : nullptr);
  Py_DECREF(record);
  if (out != nullptr || PyErr_Occurred()) return out;
  return python_path(argv, argc);
}

PyMethodDef methods[] = {
    {"scalar_torch_function", reinterpret_cast<PyCFunction>(scalar_torch_function), METH_FASTCALL,
     "scalar_torch_function(cls, func, types, args=(), kwargs=None): "
     "ScalarTensor.__torch_function__, with its most common calls in C."},
    {nullptr, nullptr, 0, nullptr}};

// -- the rules as Python calls them (tensortools/types/scalar/common.py and the families) --

namespace py = pybind11;

// N (a Python int >= 0, perhaps beyond int64) as a Count.
Count count_of(const py::int_& n) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow < 0 || (overflow == 0 && v < 0)) throw py::value_error("N must be >= 0");
  if (overflow == 0) return count(v);
  const double real = PyLong_AsDouble(n.ptr());
  if (real == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return {static_cast<uint64_t>(PyLong_AsUnsignedLongLongMask(n.ptr())), real, false};
}

// A new reference from the functions above as a Python answer: None for nullptr without an
// error set (the caller's NotImplemented).
py::object answer(PyObject* out) {
  if (out == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return py::none();
  }
  return py::reinterpret_steal<py::object>(out);
}

at::ScalarType dtype_of(const py::handle& dtype) {
  if (!THPDtype_Check(dtype.ptr())) throw py::type_error("'dtype' must be a torch.dtype");
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

void add_rules(py::module_& m) {
  py::dict codes;
  for (const auto& [name, code] : kCodeNames) codes[name] = code;
  m.attr("scalar_fast_codes") = codes;
  m.def(
      "scalar_whole_sum",
      [](const py::int_& n, const at::Tensor& pair) {
        return answer(whole_sum(count_of(n), pair));
      },
      "scalar_whole_sum(N, pair): the whole sum of value * I_N, or None (the dense call's).");
  m.def(
      "scalar_frobenius",
      [](const py::int_& n, const at::Tensor& pair) {
        return answer(frobenius(count_of(n), pair));
      },
      "scalar_frobenius(N, pair): the Frobenius norm of value * I_N, or None.");
  m.def(
      "scalar_repeated",
      [](long code, const py::int_& n, const at::Tensor& pair) {
        int overflow = 0;
        const long long size = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
        if (size == -1 && PyErr_Occurred()) throw py::error_already_set();
        if (overflow != 0 || (code != kEigvals && code != kEigvalsh && code != kSvdvals)) {
          return py::object(py::none());
        }
        return answer(repeated(code, size, pair));
      },
      "scalar_repeated(code, N, pair): eigvals, eigvalsh or svdvals of value * I_N, or None.");
  m.def(
      "scalar_in_range",
      [](const py::handle& x, const py::handle& dtype) {
        double largest, tiny;
        const at::ScalarType type = dtype_of(dtype);
        if (!limits(type, &largest, &tiny)) {
          throw py::type_error("scalar_in_range: 'dtype' must be a floating or complex dtype");
        }
        const double value = PyFloat_AsDouble(x.ptr());
        if (value == -1.0 && PyErr_Occurred()) {
          if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
          PyErr_Clear();  // (an int beyond any double: far outside the range)
          return false;
        }
        return in_range(value, largest, tiny);
      },
      "scalar_in_range(x, dtype): whether |x| is 0 or well inside dtype's normal range.");
  m.def(
      "scalar_number_passes",
      [](const py::handle& x, const at::Tensor& pair) {
        const int verdict = number_passes(x.ptr(), pair);
        if (verdict < 0) throw py::error_already_set();
        return verdict == 1;
      },
      "scalar_number_passes(x, pair): whether a number goes to a function on the pair as it is.");
  m.def(
      "scalar_probe", [](const at::Tensor& pair) { return probe_of(pair); },
      "scalar_probe(pair): the tensor an elementwise function of value * I runs on.");
  m.def(
      "scalar_probed_pair",
      [](const at::Tensor& result) {
        at::Tensor pair = probed_pair(result);
        return pair.defined() ? py::cast(pair) : py::object(py::none());
      },
      "scalar_probed_pair(result): the pair of a function's result on the probe, or None "
      "where the dense matrix's entries would depend on N or on the loop computing them.");
  m.def(
      "scalar_lapack_safe",
      [](const at::Tensor& pair, bool usable) { return lapack_safe(pair, usable); },
      "scalar_lapack_safe(pair, usable): whether LAPACK treats value * I exactly.");
}

}  // namespace

void add_scalar_dispatch(pybind11::module_& m) {
  struct Name {
    PyObject** slot;
    const char* text;
  };
  for (const Name& name : {Name{&s_fast, "_fast"}, Name{&s_python_path, "_python_torch_function"},
                           Name{&s_n, "N"}, Name{&s_pair, "_pair"}}) {
    *name.slot = PyUnicode_InternFromString(name.text);
    if (*name.slot == nullptr) {
      throw pybind11::error_already_set();
    }
  }
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr) throw pybind11::error_already_set();
  const char* arithmetic_names[] = {"add", "sub", "mul", "div"};
  for (int i = 0; i < 4; ++i) {
    g_arithmetic[i] = PyObject_GetAttrString(torch, arithmetic_names[i]);
    if (g_arithmetic[i] == nullptr) {
      Py_DECREF(torch);
      throw pybind11::error_already_set();
    }
  }
  Py_DECREF(torch);
  g_empty = PyTuple_New(0);
  if (g_empty == nullptr || PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
  add_rules(m);
}

}  // namespace tensortools::python
