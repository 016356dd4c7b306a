// MetadataTensor.__torch_function__ in C for the common call: no handler registered, the
// "fallback" policy, tracking on, the "first" merge policy, no setting overridden in the
// calling thread's context, and no other overriding type taking part. Such a call costs a plain
// call plus little: the metadata dict of the first MetadataTensor argument is found, the function
// runs with subclass dispatch disabled (as torch._C.DisableTorchFunctionSubclass does), and a plain
// Tensor result becomes a MetadataTensor holding a copy of that dict. With tracking off, a call
// without another overriding type is the plain call alone, its result returned as it is. Every
// other call, and every result that is not a single Tensor, goes to the Python implementation,
// which stays the reference; so does wrapping any result that is not one plain strided
// tensor.
#include "metadata_dispatch.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {
namespace {

// Set once by setup(): torch.Tensor, the functions whose results are never wrapped, and
// the Python output wrapper.
PyObject* g_tensor_type = nullptr;
PyObject* g_no_wrap = nullptr;
PyObject* g_wrap_outputs = nullptr;  // wrap_outputs(cls, result, context)
PyObject* g_overrides = nullptr;     // the context variable of the settings' overrides

// Interned attribute names and the setting values the fast path requires.
PyObject* s_fast = nullptr;  // "_fast_dispatch": the class keeps the C path's hooks
PyObject* s_tracking = nullptr;
PyObject* s_merge_policy = nullptr;
PyObject* s_policy = nullptr;
PyObject* s_handlers = nullptr;
PyObject* s_metadata = nullptr;
PyObject* s_class = nullptr;
PyObject* s_as_subclass = nullptr;
PyObject* s_first = nullptr;
PyObject* s_fallback = nullptr;
PyObject* s_python_path = nullptr;  // "_python_torch_function", the class's Python path

// New reference to cls.<name>, or nullptr with an exception set.
PyObject* class_attr(PyObject* cls, PyObject* name) { return PyObject_GetAttr(cls, name); }

// 1 if the class attribute `name` is `expected` (by ==), 0 if not, -1 on error.
int class_attr_is(PyObject* cls, PyObject* name, PyObject* expected) {
  PyObject* value = class_attr(cls, name);
  if (value == nullptr) {
    return -1;
  }
  int same = value == expected ? 1 : PyObject_RichCompareBool(value, expected, Py_EQ);
  Py_DECREF(value);
  return same;
}

// 1 when every overriding type of the call is cls, a subclass or a parent of it; 0 when
// another one takes part (Python then hands our instances to it as plain tensors).
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

// Which path a call takes: the Python implementation, the compiled tracking path, or,
// with tracking off, the plain call alone (its result returned as it is, as the Python
// path does). Each class setting is read once; kError with an exception set.
enum class Path { kPython, kTracked, kUntracked, kError };

// 1 when the calling context overrides a setting (the Python path then reads it), 0 when
// not, -1 on error.
int settings_overridden() {
  PyObject* overrides = nullptr;
  if (PyContextVar_Get(g_overrides, Py_None, &overrides) < 0) {
    return -1;
  }
  const int active = overrides == Py_None ? 0 : PyObject_IsTrue(overrides);
  Py_DECREF(overrides);
  return active;
}

Path choose_path(PyObject* cls, PyObject* func, PyObject* types) {
  auto decided = [](int ok) { return ok < 0 ? Path::kError : Path::kPython; };
  int ok = settings_overridden();
  if (ok != 0) return ok < 0 ? Path::kError : Path::kPython;
  ok = class_attr_is(cls, s_fast, Py_True);
  if (ok != 1) return decided(ok);
  PyObject* tracking = class_attr(cls, s_tracking);
  if (tracking == nullptr) return Path::kError;
  const int on = PyObject_IsTrue(tracking);  // as the Python path's `if cls._tracking:`
  Py_DECREF(tracking);
  if (on < 0) return Path::kError;
  if (on == 0) return only_own_types(cls, types) == 1 ? Path::kUntracked : Path::kPython;
  ok = class_attr_is(cls, s_policy, s_fallback);
  if (ok != 1) return decided(ok);
  ok = class_attr_is(cls, s_merge_policy, s_first);
  if (ok != 1) return decided(ok);
  PyObject* handlers = class_attr(cls, s_handlers);
  if (handlers == nullptr) return Path::kError;
  ok = PyDict_Check(handlers) ? PyDict_Contains(handlers, func) : 1;
  Py_DECREF(handlers);
  if (ok != 0) return ok < 0 ? Path::kError : Path::kPython;
  ok = PySet_Contains(g_no_wrap, func);
  if (ok != 0) return ok < 0 ? Path::kError : Path::kPython;
  return only_own_types(cls, types) == 1 ? Path::kTracked : Path::kPython;
}

// The metadata dict of the first instance of cls among `items` (and in lists and tuples
// within them), as MetadataTensor._collect finds it. Borrowed from the instance's __dict__;
// nullptr when there is none. Sets *error on failure.
PyObject* first_metadata(PyObject* cls, PyObject* const* items, Py_ssize_t n, bool* error,
                         int depth = 0) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = items[i];
    if (PyObject_TypeCheck(item, reinterpret_cast<PyTypeObject*>(cls))) {
      PyObject* dict = PyObject_GenericGetDict(item, nullptr);
      if (dict == nullptr) {
        *error = true;
        return nullptr;
      }
      PyObject* metadata = PyDict_GetItemWithError(dict, s_metadata);  // borrowed
      Py_DECREF(dict);  // the instance keeps its __dict__ (and so `metadata`) alive
      if (metadata == nullptr && PyErr_Occurred()) {
        *error = true;
        return nullptr;
      }
      if (metadata != nullptr && metadata != Py_None) {
        return metadata;
      }
    } else if ((PyTuple_Check(item) || PyList_Check(item)) && depth < 8) {
      PyObject* seq = PySequence_Fast(item, "");
      if (seq == nullptr) {
        *error = true;
        return nullptr;
      }
      PyObject* found = first_metadata(cls, PySequence_Fast_ITEMS(seq),
                                       PySequence_Fast_GET_SIZE(seq), error, depth + 1);
      Py_DECREF(seq);
      if (found != nullptr || *error) {
        return found;
      }
    }
  }
  return nullptr;
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
  // ours, and one C++ reference, the Python object's) and has no attributes: it can
  // change class in place, where torch.Tensor.as_subclass would make an alias. Anything
  // else (a tensor someone else holds) gets an alias, so its owner's object is left as
  // it was.
  if (Py_REFCNT(result) == 1 && THPVariable_Unpack(result).use_count() == 1) {
    PyObject* dict = PyObject_GenericGetDict(result, nullptr);
    if (dict == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    const bool bare = PyDict_GET_SIZE(dict) == 0;
    Py_DECREF(dict);
    if (bare) {
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

PyObject* metadata_torch_function(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc < 3 || argc > 5) {
    PyErr_SetString(PyExc_TypeError,
                    "metadata_torch_function(cls, func, types, args=(), kwargs=None)");
    return nullptr;
  }
  if (g_tensor_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "metadata_torch_function: setup() was not called");
    return nullptr;
  }
  PyObject* cls = argv[0];
  PyObject* func = argv[1];
  PyObject* types = argv[2];
  PyObject* args = argc > 3 ? argv[3] : nullptr;
  PyObject* kwargs = argc > 4 && argv[4] != Py_None ? argv[4] : nullptr;
  if (!PyType_Check(cls) || (args != nullptr && !PyTuple_Check(args)) ||
      (kwargs != nullptr && !PyDict_Check(kwargs))) {
    return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);
  }
  switch (choose_path(cls, func, types)) {
    case Path::kError:
      return nullptr;
    case Path::kPython:
      return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);  // cls.<name>(...)
    case Path::kUntracked:
      return call_plain(func, args, kwargs);
    case Path::kTracked:
      break;
  }

  bool error = false;
  PyObject* metadata = nullptr;  // borrowed
  if (args != nullptr) {
    metadata = first_metadata(cls, PySequence_Fast_ITEMS(args), PyTuple_GET_SIZE(args), &error);
  }
  if (metadata == nullptr && !error && kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
    PyObject* values = PyDict_Values(kwargs);
    if (values == nullptr) return nullptr;
    metadata = first_metadata(cls, PySequence_Fast_ITEMS(values), PyList_GET_SIZE(values), &error);
    // The dict found lives in an instance that `kwargs` holds, which outlives this call.
    Py_DECREF(values);
  }
  if (error) {
    return nullptr;
  }
  // The dict results copy; a new reference, since the call may drop the argument that
  // holds it.
  PyObject* context = metadata != nullptr ? Py_NewRef(metadata) : PyDict_New();
  if (context == nullptr) {
    return nullptr;
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
      out = Py_NewRef(result);  // an in-place call returned its MetadataTensor argument
    } else {  // other results (tuples, sparse tensors, ...) as the Python path wraps them
      PyObject* wrap_args[] = {cls, result, context};
      out = PyObject_Vectorcall(g_wrap_outputs, wrap_args, 3, nullptr);
    }
    Py_DECREF(result);
    Py_DECREF(context);
    return out;
  }

  PyObject* copy = PyDict_Check(context)
                       ? PyDict_Copy(context)
                       : PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), context);
  Py_DECREF(context);
  if (copy == nullptr) {
    Py_DECREF(result);
    return nullptr;
  }
  PyObject* out = as_instance(cls, result);
  if (out != nullptr && PyObject_SetAttr(out, s_metadata, copy) != 0) {
    Py_CLEAR(out);
  }
  Py_DECREF(copy);
  return out;
}

PyObject* setup(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 4 || !PyType_Check(argv[0]) || !PyAnySet_Check(argv[1]) ||
      !PyCallable_Check(argv[2]) || !PyContextVar_CheckExact(argv[3])) {
    PyErr_SetString(PyExc_TypeError,
                    "metadata_dispatch_setup(tensor_type, no_wrap: frozenset, wrap_outputs, "
                    "overrides: ContextVar)");
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
    {"metadata_torch_function", reinterpret_cast<PyCFunction>(metadata_torch_function),
     METH_FASTCALL,
     "metadata_torch_function(cls, func, types, args=(), kwargs=None): "
     "MetadataTensor.__torch_function__, with the common case in C."},
    {"metadata_dispatch_setup", reinterpret_cast<PyCFunction>(setup), METH_FASTCALL,
     "metadata_dispatch_setup(tensor_type, no_wrap, wrap_outputs, overrides): what "
     "metadata_torch_function needs from Python."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void add_metadata_dispatch(pybind11::module_& m) {
  struct Name {
    PyObject** slot;
    const char* text;
  };
  // The settings' process-wide values (tensortools/_settings.py keeps them under these
  // names; the C path runs only when no context overrides them).
  for (const Name& name :
       {Name{&s_fast, "_fast_dispatch"}, Name{&s_tracking, "_global_tracking"},
        Name{&s_merge_policy, "_global_merge_policy"}, Name{&s_policy, "_global_policy"},
        Name{&s_handlers, "_handlers"}, Name{&s_metadata, "metadata"}, Name{&s_class, "__class__"},
        Name{&s_as_subclass, "as_subclass"}, Name{&s_first, "first"}, Name{&s_fallback, "fallback"},
        Name{&s_python_path, "_python_torch_function"}}) {
    *name.slot = PyUnicode_InternFromString(name.text);
    if (*name.slot == nullptr) {
      throw pybind11::error_already_set();
    }
  }
  if (PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
}

}  // namespace tensortools::python
