// The rules of ScalarTensor's exact answers and their Python bindings (scalar_rules.h).
#include "scalar_rules.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <complex>
#include <limits>
#include <utility>

namespace tensortools::python::scalar {
namespace {

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
                                                       {"MATMUL", kMatmul},
                                                       {"SCALE", kScale},
                                                       {"ADD_DIAGONAL", kAddDiagonal},
                                                       {"AXPBY", kAxpby},
                                                       {"LLTM", kLltm},
                                                       {"GRAPH_CONV", kGraphConv}};

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

}  // namespace

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

bool in_range(double x, double largest, double tiny) {
  x = std::fabs(x);
  return x == 0 || (4 * tiny <= x && x <= largest / 4);
}

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

namespace {

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

}  // namespace

void add_scalar_rules(py::module_& m) {
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

}  // namespace tensortools::python::scalar
