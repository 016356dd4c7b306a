// The gate of TensorWrapper's compiled path: whether a call takes it, and how its results
// are wrapped, from the class's record and the calling thread's state. The record is a
// WrapperRecord (tensortools/dispatch/compiled_path.py), whose fields this file finds by
// name once, when it is set up; anything else in cls._fast sends every call to the
// Python path. See Note [The compiled paths] in docs/design.md.
#include "wrapper_record.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "wrapper_state.h"

#include <ATen/PythonTorchFunctionTLS.h>

namespace tensortools::python::wrapper {
namespace {

// The kinds by the names Python's WrapperPath gives them.
constexpr std::pair<const char*, long> kKindNames[] = {
    {"PYTHON", kPython}, {"WRAP", kWrap}, {"WRAP_METADATA", kWrapMetadata}, {"PLAIN", kPlain}};

// 1 when a per-thread store holds a value (not None) in the calling thread, 0 when not,
// -1 on error.
int store_is_set(PyObject* store) {
  PyObject* value = PyObject_GetAttr(store, s_value);
  if (value == nullptr) {
    return -1;
  }
  const int set = value != Py_None;
  Py_DECREF(value);
  return set;
}

// 1 when every overriding type of the call is cls, a subclass or a parent of it (or
// torch.Tensor: a plain tensor beside a tensor-like); 0 when another one takes part (the
// Python path then hands our instances to it as plain tensors). Exported as
// only_own_types: the one definition of the rule.
int only_own_types(PyObject* cls, PyObject* types) {
  if (!PyTuple_Check(types)) return 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); ++i) {
    PyObject* t = PyTuple_GET_ITEM(types, i);
    if (t == cls || t == g_tensor_type) continue;
    if (!PyType_Check(t)) return 0;
    auto* type = reinterpret_cast<PyTypeObject*>(t);
    auto* klass = reinterpret_cast<PyTypeObject*>(cls);
    if (!PyType_IsSubtype(type, klass) && !PyType_IsSubtype(klass, type)) {
      return 0;
    }
  }
  return 1;
}

// The record's field, borrowed from the record (which the caller holds).
PyObject* field(PyObject* record, Field f) { return PyTuple_GET_ITEM(record, g_field_index[f]); }

}  // namespace

int set_record_type(PyObject* type) {
  PyObject* names = PyObject_GetAttrString(type, "_fields");  // (null: no named tuple)
  Py_ssize_t found[kFieldCount];
  int ok = names != nullptr && PyTuple_Check(names) ? 0 : -1;
  for (int f = 0; ok == 0 && f < kFieldCount; ++f) {
    found[f] = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
      const char* name = PyUnicode_Check(PyTuple_GET_ITEM(names, i))
                             ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i))
                             : nullptr;
      if (name != nullptr && std::strcmp(name, kFieldNames[f]) == 0) found[f] = i;
    }
    if (found[f] < 0) ok = -1;
  }
  Py_XDECREF(names);
  if (ok != 0) {
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_dispatch_setup: 'record_type' must be a named tuple class with "
                    "the fields kind, handlers, logger, captures, carrier, batch_calls");
    return -1;
  }
  std::copy(found, found + kFieldCount, g_field_index);
  Py_INCREF(type);
  Py_XSETREF(g_record_type, type);
  return 0;
}

long choose_kind(PyObject* cls, PyObject* func, PyObject* types, PyObject** carrier,
                 PyObject** batch_calls) {
  // Called while subclass dispatch is disabled: a TorchFunctionMode declined a method call
  // that torch showed it with our instance as self (see _python_torch_function).
  if (at::impl::PythonTorchFunctionTLS::get_disabled_state() !=
      at::impl::TorchFunctionDisabledState::ENABLED) {
    return kPython;
  }
  PyObject* overrides = Py_NewRef(g_overrides);
  int set = store_is_set(overrides);
  Py_DECREF(overrides);
  if (set != 0) return set < 0 ? -1 : kPython;
  PyObject* record = PyObject_GetAttr(cls, s_fast);  // (held: its fields are borrowed)
  if (record == nullptr) return -1;
  long kind = kPython;
  if (g_record_type != nullptr &&
      Py_TYPE(record) == reinterpret_cast<PyTypeObject*>(g_record_type)) {
    kind = PyLong_AsLong(field(record, kKindField));
    PyObject* handlers = field(record, kHandlers);
    PyObject* logger = field(record, kLogger);
    PyObject* captures = field(record, kCaptures);
    int ok = 0;
    if (kind == -1 && PyErr_Occurred()) {
      ok = -1;
    }
    if (ok == 0 && kind != kPython && captures != Py_None) {
      ok = store_is_set(captures);  // 1: a capture is open in this thread
    }
    if (ok == 0 && kind != kPython && logger != Py_None) {
      PyObject* enabled = PyObject_CallMethodOneArg(logger, s_is_enabled_for, s_info_level);
      ok = enabled == nullptr ? -1 : PyObject_IsTrue(enabled);
      Py_XDECREF(enabled);
    }
    if (ok == 0 && kind != kPython) {
      ok = PyDict_Check(handlers) ? PyDict_Contains(handlers, func) : 1;
    }
    if (ok == 0 && kind != kPython) {
      PyObject* no_wrap = Py_NewRef(g_no_wrap);
      ok = PySet_Contains(no_wrap, func);
      Py_DECREF(no_wrap);
    }
    if (ok == 0 && kind != kPython) {
      ok = only_own_types(cls, types) == 1 ? 0 : 1;
    }
    if (ok == 0 && kind != kWrap && kind != kWrapMetadata && kind != kPlain) {
      ok = 1;  // a kind this file does not know: the Python path
    }
    if (ok == 0 && kind == kWrapMetadata) {
      PyObject* klass = field(record, kCarrier);
      PyObject* calls = field(record, kBatchCalls);
      if (PyType_Check(klass) && (calls == Py_None || PyDict_Check(calls))) {
        if (carrier != nullptr) *carrier = Py_NewRef(klass);
        if (batch_calls != nullptr) *batch_calls = Py_NewRef(calls);
      } else {
        ok = 1;
      }
    }
    kind = ok < 0 ? -1 : ok > 0 ? kPython : kind;
  }
  Py_DECREF(record);
  return kind;
}

namespace {

// wrapper_path_of(cls, func, types) -> int: the gate, for the Python path.
PyObject* path_of(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 3 || !PyType_Check(argv[0]) || !PyTuple_Check(argv[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_path_of(cls: type, func, types: tuple): 'cls' must be a class "
                    "and 'types' a tuple");
    return nullptr;
  }
  if (g_overrides == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "wrapper_path_of: setup() was not called");
    return nullptr;
  }
  PyObject* cls = Py_NewRef(argv[0]);  // (held: the gate may run Python code)
  PyObject* func = Py_NewRef(argv[1]);
  PyObject* types = Py_NewRef(argv[2]);
  const long kind = choose_kind(cls, func, types, nullptr, nullptr);
  Py_DECREF(cls);
  Py_DECREF(func);
  Py_DECREF(types);
  return kind < 0 ? nullptr : PyLong_FromLong(kind);
}

// only_own_types(cls, types) -> bool: the rule, for the Python path.
PyObject* own_types_for_python(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 2 || !PyType_Check(argv[0]) || !PyTuple_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "only_own_types(cls: type, types: tuple): 'cls' must be a class and "
                    "'types' a tuple");
    return nullptr;
  }
  return PyBool_FromLong(only_own_types(argv[0], argv[1]));
}

PyMethodDef methods[] = {
    {"only_own_types", reinterpret_cast<PyCFunction>(own_types_for_python), METH_FASTCALL,
     "only_own_types(cls, types) -> bool: whether every overriding type of a call is cls, a "
     "subclass or a parent of it, or torch.Tensor (no other type takes part)."},
    {"wrapper_path_of", reinterpret_cast<PyCFunction>(path_of), METH_FASTCALL,
     "wrapper_path_of(cls, func, types) -> int: the WrapperPath the compiled path takes for "
     "cls's call of func among types before it reads the arguments (PYTHON where it leaves "
     "the call to the Python path): its gate, for the Python path to ask."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int add_record_functions(PyObject* module) {
  if (PyModule_AddFunctions(module, methods) != 0) return -1;
  PyObject* kinds = PyDict_New();
  if (kinds == nullptr) return -1;
  for (const auto& [name, value] : kKindNames) {
    PyObject* v = PyLong_FromLong(value);
    const int failed = v == nullptr || PyDict_SetItemString(kinds, name, v) != 0;
    Py_XDECREF(v);
    if (failed) {
      Py_DECREF(kinds);
      return -1;
    }
  }
  const int added = PyModule_AddObjectRef(module, "wrapper_path_kinds", kinds);
  Py_DECREF(kinds);
  return added;
}

}  // namespace tensortools::python::wrapper
