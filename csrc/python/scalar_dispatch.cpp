// ScalarTensor.__torch_function__ in C for its most common calls.
// See Note [The compiled paths] in docs/design.md.
//
// The kinds of call (Code in scalar_rules.h, exported as scalar_fast_codes: Python's
// FastCode) and the functions of each are listed in one place,
// tensortools/types/scalar/fast_path.py:
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
//      arithmetic() in scalar_binary.cpp;
//   SCALE, ADD_DIAGONAL, AXPBY  operators.py's calls of tensortools.ops.scale(d, number),
//      add_diagonal(d, number) and axpby(d, e, alpha, beta) of ScalarTensors: the
//      kernels on their pairs, see scalar_operators.h.
// The arithmetic of SUM, FROBENIUS and the eigenvalues, and the range rules the Python
// handlers share (probe_of, probed_pair, in_range, number_passes, lapack_safe), are
// defined once, in scalar_rules.cpp and scalar_values.cpp, and exported to Python
// (scalar_probe, scalar_probed_pair, scalar_whole_sum, scalar_frobenius, scalar_repeated,
// scalar_in_range, scalar_number_passes, scalar_lapack_safe): the Python handlers call them
// for every device, this path for CPU pairs (see Note [ScalarTensor's exact answers] in
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

#include <torch/csrc/autograd/python_variable.h>

#include <exception>

#include "scalar_binary.h"
#include "scalar_operators.h"
#include "scalar_rules.h"
#include "scalar_values.h"

namespace tensortools::python {
namespace {

using namespace scalar;  // the parts of this path (scalar_values.h, _rules.h, _binary.h)

// Interned names (scalar_values.h has the others).
PyObject* s_fast = nullptr;         // "_fast": the class's record
PyObject* s_python_path = nullptr;  // "_python_torch_function"

// The most positional arguments a call on this path may have (clamp(d, min, max) has 3).
constexpr Py_ssize_t kMostArguments = 8;

PyObject* python_path(PyObject* const* argv, Py_ssize_t argc) {
  return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);  // cls.<name>(...)
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
  if (code >= kScale && code <= kGraphConv) return operators(klass, cls, code, args, kwargs);
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
    scalar::g_arithmetic[i] = PyObject_GetAttrString(torch, arithmetic_names[i]);
    if (scalar::g_arithmetic[i] == nullptr) {
      Py_DECREF(torch);
      throw pybind11::error_already_set();
    }
  }
  Py_DECREF(torch);
  scalar::g_empty = PyTuple_New(0);
  if (scalar::g_empty == nullptr || PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
  scalar::add_scalar_rules(m);
}

}  // namespace tensortools::python
