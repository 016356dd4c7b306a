// The compiled path's handlers of two operands (scalar_binary.h).
#include "scalar_binary.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <complex>
#include <cstdint>

#include "scalar_rules.h"
#include "scalar_values.h"

namespace tensortools::python::scalar {

PyObject* g_arithmetic[4] = {nullptr, nullptr, nullptr, nullptr};

namespace {

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

}  // namespace

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

}  // namespace tensortools::python::scalar
