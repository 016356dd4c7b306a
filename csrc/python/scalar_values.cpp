// A ScalarTensor's pair as its compiled path reads it, and what that path makes
// (scalar_values.h).
#include "scalar_values.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace tensortools::python::scalar {

PyObject* s_n = nullptr;
PyObject* s_pair = nullptr;
PyObject* g_empty = nullptr;

namespace {

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

template <typename T>
void limits_of(double* largest, double* tiny) {
  *largest = static_cast<double>(std::numeric_limits<T>::max());
  *tiny = static_cast<double>(std::numeric_limits<T>::min());
}

}  // namespace

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

PyObject* make(PyObject* klass, PyObject* n, PyObject* pair) {
  auto* type = reinterpret_cast<PyTypeObject*>(klass);
  PyObject* out = type->tp_new(type, g_empty, nullptr);
  if (out == nullptr) return nullptr;
  if (PyObject_SetAttr(out, s_n, n) != 0 || PyObject_SetAttr(out, s_pair, pair) != 0) {
    Py_CLEAR(out);
  }
  return out;
}

bool pair_entry(const at::Tensor& pair, int64_t i, std::complex<double>* value, int64_t* integer) {
  if (!pair.defined() || pair.is_meta() || pair.layout() != at::kStrided || pair.dim() != 1 ||
      pair.size(0) <= i) {
    return false;
  }
  if (pair.is_cpu() && !pair.is_conj() && !pair.is_neg()) return entry(pair, i, value, integer);
  return entry(pair.resolve_conj().resolve_neg().to(at::kCPU), i, value, integer);
}

PyObject* number(const c10::Scalar& number, const at::TensorOptions& options) {
  at::Tensor t = at::empty({}, options.device(at::kCPU));
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(
      at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "scalar_dispatch_number",
      [&] { *t.mutable_data_ptr<scalar_t>() = number.to<scalar_t>(); });
  if (options.device() != t.device()) t = t.to(options.device());
  return THPVariable_Wrap(std::move(t));
}

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

}  // namespace tensortools::python::scalar
