// TensorWrapper.__torch_function__ in C for the common call of every wrapper type: no
// handler for the call, no setting overridden in the calling thread, and no overriding
// type taking part but the class's own. Such a call costs the plain call plus little: the
// function runs with subclass dispatch disabled (as torch._C.DisableTorchFunctionSubclass
// does) and a plain strided Tensor result becomes an instance of the class. Every other
// call goes to the class's Python path (cls._python_torch_function), which defines the
// behaviour; so does wrapping any result that is not one plain strided tensor.
//
// What the fast path needs from a class is one record, cls._fast (a tuple, recomputed by
// tensortools/dispatch/wrapper.py whenever a handler is registered or a process-wide
// setting changes):
//   (kind, handlers, logger, captures)
//   kind      0: take the Python path; 1: wrap results as the class; 2: the same, each
//             result holding a copy of the metadata dict of the first instance among the
//             arguments (MetadataTensor); 3: run the plain call alone and return its
//             result as it is (MetadataTensor with tracking off)
//   handlers  the class's handler table: a call with a handler takes the Python path
//   logger    None, or a logging.Logger: while it is enabled for INFO, the Python path
//   captures  None, or a per-thread store (tensortools._settings.ThreadStore): while its
//             value is set in the calling thread, the Python path
//
// torch.compile cannot trace C: tensortools/dispatch/wrapper.py registers a Python stand-in
// for wrapper_torch_function (the Python path), so that compiled functions trace through
// it. wrapper_torch_function_eager is the same function with no stand-in, for a type whose
// calls must run eagerly under torch.compile (LoggingTensor: a graph break per call).
#include "wrapper_dispatch.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {
namespace {

// Set once by setup(): torch.Tensor, the functions whose results are never wrapped, the
// Python output wrapper, and the per-thread store of the settings' overrides.
PyObject* g_tensor_type = nullptr;
PyObject* g_no_wrap = nullptr;
PyObject* g_wrap_outputs = nullptr;  // wrap_outputs(cls, result, context)
PyObject* g_overrides = nullptr;

// Interned names.
PyObject* s_fast = nullptr;         // "_fast": the class's record
PyObject* s_python_path = nullptr;  // "_python_torch_function"
PyObject* s_value = nullptr;        // a ThreadStore's "value"
PyObject* s_is_enabled_for = nullptr;
PyObject* s_metadata = nullptr;
PyObject* s_class = nullptr;
PyObject* s_as_subclass = nullptr;
PyObject* s_info_level = nullptr;  // logging.INFO, 20

enum Kind : long { kPython = 0, kWrap = 1, kWrapMetadata = 2, kPlain = 3 };

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

// 1 when every overriding type of the call is cls, a subclass or a parent of it; 0 when
// another one takes part (the Python path then hands our instances to it as plain tensors).
int only_own_types(PyObject* cls, PyObject* types) {
  if (!PyTuple_Check(types)) return 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); ++i) {
    PyObject* t = PyTuple_GET_ITEM(types, i);
    if (!PyType_Check(t)) return 0;
    auto* type = reinterpret_cast<PyTypeObject*>(t);
    auto* klass = reinterpret_cast<PyTypeObject*>(cls);
    if (!PyType_IsSubtype(type, klass) && !PyType_IsSubtype(klass, type)) {
      return 0;
    }
  }
  return 1;
}

// The kind of path a call takes (see the file comment); -1 with an exception set on error.
long choose_kind(PyObject* cls, PyObject* func, PyObject* types) {
  int set = store_is_set(g_overrides);
  if (set != 0) return set < 0 ? -1 : kPython;
  PyObject* record = PyObject_GetAttr(cls, s_fast);
  if (record == nullptr) return -1;
  long kind = kPython;
  if (PyTuple_Check(record) && PyTuple_GET_SIZE(record) == 4) {
    kind = PyLong_AsLong(PyTuple_GET_ITEM(record, 0));
    PyObject* handlers = PyTuple_GET_ITEM(record, 1);
    PyObject* logger = PyTuple_GET_ITEM(record, 2);
    PyObject* captures = PyTuple_GET_ITEM(record, 3);
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
      ok = PySet_Contains(g_no_wrap, func);
    }
    if (ok == 0 && kind != kPython) {
      ok = only_own_types(cls, types) == 1 ? 0 : 1;
    }
    if (ok == 0 && kind != kWrap && kind != kWrapMetadata && kind != kPlain) {
      ok = 1;  // a kind this file does not know: the Python path
    }
    kind = ok < 0 ? -1 : ok > 0 ? kPython : kind;
  }
  Py_DECREF(record);
  return kind;
}

// Where the metadata dict of a call's results comes from.
enum class Search { kNone, kFound, kError, kPython };

// The metadata dict of the first instance of cls among `items`, and in plain lists and
// tuples within them, as MetadataTensor.context finds it (torch.utils._pytree takes both
// apart). *found is borrowed from the instance's __dict__. kPython: an argument this file
// does not take apart as pytree would (a subclass of list or tuple, such as a named
// tuple, whose iteration could run Python code; nesting deeper than 16): the Python path
// decides.
Search first_metadata(PyObject* cls, PyObject* const* items, Py_ssize_t n, PyObject** found,
                      int depth = 0) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = items[i];
    if (PyObject_TypeCheck(item, reinterpret_cast<PyTypeObject*>(cls))) {
      PyObject* dict = PyObject_GenericGetDict(item, nullptr);
      if (dict == nullptr) return Search::kError;
      PyObject* metadata = PyDict_GetItemWithError(dict, s_metadata);  // borrowed
      Py_DECREF(dict);  // the instance keeps its __dict__ (and so `metadata`) alive
      if (metadata == nullptr && PyErr_Occurred()) return Search::kError;
      if (metadata != nullptr && metadata != Py_None) {
        *found = metadata;
        return Search::kFound;
      }
    } else if (PyTuple_CheckExact(item) || PyList_CheckExact(item)) {
      if (depth >= 16) return Search::kPython;
      // (an exact list or tuple: its items, read without running any Python code)
      PyObject* const* inner =
          PyTuple_CheckExact(item) ? &PyTuple_GET_ITEM(item, 0) : PySequence_Fast_ITEMS(item);
      Search s = first_metadata(cls, inner, Py_SIZE(item), found, depth + 1);
      if (s != Search::kNone) return s;
    } else if (PyTuple_Check(item) || PyList_Check(item)) {
      return Search::kPython;
    }
  }
  return Search::kNone;
}

// The metadata the call's results take (a new reference; a new empty dict when no
// argument has any) in *metadata, or kPython, or kError with an exception set.
Search call_metadata(PyObject* cls, PyObject* args, PyObject* kwargs, PyObject** metadata) {
  PyObject* found = nullptr;  // borrowed
  Search s = Search::kNone;
  if (args != nullptr) {
    s = first_metadata(cls, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), &found);
  }
  if (s == Search::kNone && kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
    Py_ssize_t pos = 0;
    PyObject* key;
    PyObject* value;
    while (s == Search::kNone && PyDict_Next(kwargs, &pos, &key, &value)) {
      s = first_metadata(cls, &value, 1, &found);
    }
  }
  if (s == Search::kError || s == Search::kPython) return s;
  // A new reference: the call may drop the argument that holds the dict.
  *metadata = found != nullptr ? Py_NewRef(found) : PyDict_New();
  return *metadata == nullptr ? Search::kError : Search::kFound;
}

// func(*args, **kwargs) with __torch_function__ of subclasses disabled (args and kwargs
// may be null).
PyObject* call_plain(PyObject* func, PyObject* args, PyObject* kwargs) {
  using at::impl::PythonTorchFunctionTLS;
  using at::impl::TorchFunctionDisabledState;
  PyObject* empty = nullptr;
  if (args == nullptr) {
    args = empty = PyTuple_New(0);
    if (empty == nullptr) return nullptr;
  }
  const TorchFunctionDisabledState old = PythonTorchFunctionTLS::get_disabled_state();
  if (old == TorchFunctionDisabledState::ENABLED) {
    PythonTorchFunctionTLS::set_disabled_state(TorchFunctionDisabledState::SUBCLASSES_DISABLED);
  }
  PyObject* result = PyObject_Call(func, args, kwargs);
  PythonTorchFunctionTLS::set_disabled_state(old);
  Py_XDECREF(empty);
  return result;
}

// A plain torch.Tensor `result` (a new reference, stolen) as an instance of cls.
PyObject* as_instance(PyObject* cls, PyObject* result) {
  // A tensor this call created is referenced from nowhere else (one Python reference,
  // ours, and one C++ reference, the Python object's) and has no attributes: it changes
  // class in place, which costs far less than the alias torch.Tensor.as_subclass makes
  // (the Python path's results are such aliases: the same values, type and gradients,
  // but views of the plain result). Anything else (a tensor someone else holds) gets an
  // alias, so its owner's object is left as it was. (Classes with a __torch_dispatch__ of
  // their own, which needs the dispatch keys only as_subclass sets, take the Python path.)
  if (Py_REFCNT(result) == 1 && THPVariable_Unpack(result).use_count() == 1) {
    // (the dict slot, read without creating a dict where there is none yet)
    PyObject** dict = _PyObject_GetDictPtr(result);
    if (dict == nullptr || *dict == nullptr || PyDict_GET_SIZE(*dict) == 0) {
      if (PyObject_SetAttr(result, s_class, cls) == 0) {
        return result;
      }
      PyErr_Clear();  // layouts the class cannot take: make an alias below
    }
  }
  PyObject* out = PyObject_CallMethodOneArg(result, s_as_subclass, cls);
  Py_DECREF(result);
  return out;
}

PyObject* python_path(PyObject* const* argv, Py_ssize_t argc) {
  return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);  // cls.<name>(...)
}

PyObject* wrapper_torch_function(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc < 3 || argc > 5) {
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_torch_function(cls, func, types, args=(), kwargs=None)");
    return nullptr;
  }
  if (g_tensor_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "wrapper_torch_function: setup() was not called");
    return nullptr;
  }
  PyObject* cls = argv[0];
  PyObject* func = argv[1];
  PyObject* types = argv[2];
  PyObject* args = argc > 3 ? argv[3] : nullptr;
  PyObject* kwargs = argc > 4 && argv[4] != Py_None ? argv[4] : nullptr;
  if (!PyType_Check(cls) || (args != nullptr && !PyTuple_Check(args)) ||
      (kwargs != nullptr && !PyDict_Check(kwargs))) {
    return python_path(argv, argc);
  }
  const long kind = choose_kind(cls, func, types);
  if (kind < 0) return nullptr;
  if (kind == kPython) return python_path(argv, argc);
  if (kind == kPlain) return call_plain(func, args, kwargs);

  PyObject* context = Py_None;
  if (kind == kWrapMetadata) {
    const Search s = call_metadata(cls, args, kwargs, &context);
    if (s == Search::kError) return nullptr;
    if (s == Search::kPython) return python_path(argv, argc);
  } else {
    Py_INCREF(context);
  }
  PyObject* result = call_plain(func, args, kwargs);
  if (result == nullptr) {
    Py_DECREF(context);
    return nullptr;
  }

  if (Py_TYPE(result) != reinterpret_cast<PyTypeObject*>(g_tensor_type) ||
      THPVariable_Unpack(result).layout() != at::kStrided) {
    PyObject* out;
    if (PyObject_TypeCheck(result, reinterpret_cast<PyTypeObject*>(cls))) {
      out = Py_NewRef(result);  // an in-place call returned its argument
    } else {  // other results (tuples, sparse tensors, ...) as the Python path wraps them
      PyObject* wrap_args[] = {cls, result, context};
      out = PyObject_Vectorcall(g_wrap_outputs, wrap_args, 3, nullptr);
    }
    Py_DECREF(result);
    Py_DECREF(context);
    return out;
  }

  PyObject* out = as_instance(cls, result);
  if (out != nullptr && kind == kWrapMetadata) {
    PyObject* copy = PyDict_Check(context)
                         ? PyDict_Copy(context)
                         : PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), context);
    if (copy == nullptr || PyObject_SetAttr(out, s_metadata, copy) != 0) {
      Py_CLEAR(out);
    }
    Py_XDECREF(copy);
  }
  Py_DECREF(context);
  return out;
}

PyObject* setup(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 4 || !PyType_Check(argv[0]) || !PyAnySet_Check(argv[1]) ||
      !PyCallable_Check(argv[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_dispatch_setup(tensor_type, no_wrap: frozenset, wrap_outputs, "
                    "overrides)");
    return nullptr;
  }
  PyObject** slots[] = {&g_tensor_type, &g_no_wrap, &g_wrap_outputs, &g_overrides};
  for (int i = 0; i < 4; ++i) {
    Py_INCREF(argv[i]);
    Py_XSETREF(*slots[i], argv[i]);
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"wrapper_torch_function", reinterpret_cast<PyCFunction>(wrapper_torch_function), METH_FASTCALL,
     "wrapper_torch_function(cls, func, types, args=(), kwargs=None): "
     "TensorWrapper.__torch_function__, with the common call in C."},
    {"wrapper_torch_function_eager", reinterpret_cast<PyCFunction>(wrapper_torch_function),
     METH_FASTCALL,
     "The same function as wrapper_torch_function, for types whose calls torch.compile "
     "must run eagerly (no Python stand-in is registered for it: each call is a graph "
     "break)."},
    {"wrapper_dispatch_setup", reinterpret_cast<PyCFunction>(setup), METH_FASTCALL,
     "wrapper_dispatch_setup(tensor_type, no_wrap, wrap_outputs, overrides): what "
     "wrapper_torch_function needs from Python."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void add_wrapper_dispatch(pybind11::module_& m) {
  struct Name {
    PyObject** slot;
    const char* text;
  };
  for (const Name& name : {Name{&s_fast, "_fast"}, Name{&s_python_path, "_python_torch_function"},
                           Name{&s_value, "value"}, Name{&s_is_enabled_for, "isEnabledFor"},
                           Name{&s_metadata, "metadata"}, Name{&s_class, "__class__"},
                           Name{&s_as_subclass, "as_subclass"}}) {
    *name.slot = PyUnicode_InternFromString(name.text);
    if (*name.slot == nullptr) {
      throw pybind11::error_already_set();
    }
  }
  s_info_level = PyLong_FromLong(20);  // logging.INFO
  if (s_info_level == nullptr || PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
}

}  // namespace tensortools::python
