// TensorWrapper.__torch_function__ in C for the common call of every wrapper type; every
// other call, and wrapping any result that is not one plain strided tensor, goes to the
// class's Python path (cls._python_torch_function), which defines the behaviour.
// See Note [The compiled paths] in docs/design.md.
//
// Its files: wrapper_record.cpp, the gate (which path a call takes, from the class's
// record cls._fast, a WrapperRecord of tensortools/dispatch/compiled_path.py read by its
// fields' names; exported as wrapper_path_of); wrapper_call.cpp, the walk over the
// arguments and the plain call; this file, the call and its results. For the batch calls,
// see Note [Batch rules] in docs/design.md.
//
// Which metadata and batch size the results of WRAP_METADATA take, and how, are the rules
// of metadata_results.h, which the Python path calls too (one definition). When a new
// result changes class in place rather than become an alias is adopt() below, which the
// Python path calls too (exported as wrapper_adopt).
//
// Every object this file uses across a call that can run Python is held by a reference
// of its own. See Note [Python code inside a C call] in docs/design.md.
//
// wrapper_torch_function_eager is the same function with no Python stand-in for
// torch.compile (LoggingTensor: a graph break per call). See Note [The compiled paths]
// ("Under torch.compile") in docs/design.md.
#include "wrapper_dispatch.h"

#include "batch_plan.h"
#include "metadata_results.h"
#include "wrapper_call.h"
#include "wrapper_record.h"
#include "wrapper_state.h"

#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {

using namespace wrapper;  // NOLINT(google-build-using-namespace): this path's own parts

namespace {

// Whether any weak reference to obj exists (a cache that holds it without owning it).
bool weakly_held(PyObject* obj) {
  const Py_ssize_t offset = Py_TYPE(obj)->tp_weaklistoffset;
  if (offset == 0) return false;
  // (where CPython keeps the list of an object's weak references, also at the negative
  // offset of 3.12's managed weak references)
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset) != nullptr;
}

// Whether a new plain result becomes an instance of cls in place, rather than an alias
// (torch.Tensor.as_subclass: the same values, type and gradients, but a view of it, at a
// far higher cost); if so, it now is one. It does where it is an exact torch.Tensor that
// no weak reference holds (a cache that holds it without owning it) and that has no
// attributes, of a layout the class can take. The caller knows that nothing else holds it:
// this path by counting references (as_instance), the Python path because its function
// makes new tensors by construction (tensortools.dispatch.wrapper.FRESH_RESULTS).
bool adopt(PyObject* cls, PyObject* result) {
  if (Py_TYPE(result) != reinterpret_cast<PyTypeObject*>(g_tensor_type) || weakly_held(result)) {
    return false;
  }
  // (the dict slot, read without creating a dict where there is none yet)
  PyObject** dict = _PyObject_GetDictPtr(result);
  if (dict != nullptr && *dict != nullptr && PyDict_GET_SIZE(*dict) != 0) return false;
  if (PyObject_SetAttr(result, s_class, cls) == 0) return true;
  PyErr_Clear();  // a layout the class cannot take: an alias it is
  return false;
}

// A plain torch.Tensor `result` (a new reference, stolen) as an instance of cls.
PyObject* as_instance(PyObject* cls, PyObject* result) {
  // A tensor this call created is referenced from nowhere else: one Python reference,
  // ours, and one C++ reference, the Python object's. Anything else (a tensor someone else
  // holds) gets an alias, so its owner's object is left as it was. (Classes with a
  // __torch_dispatch__ of their own, which needs the dispatch keys only as_subclass sets,
  // take the Python path.)
  if (Py_REFCNT(result) == 1 && THPVariable_Unpack(result).use_count() == 1 && adopt(cls, result)) {
    return result;
  }
  PyObject* out = PyObject_CallMethodOneArg(result, s_as_subclass, cls);
  Py_DECREF(result);
  return out;
}

PyObject* python_path(PyObject* const* argv, Py_ssize_t argc) {
  return PyObject_VectorcallMethod(s_python_path, argv, argc, nullptr);  // cls.<name>(...)
}

// Results other than one new plain strided tensor, wrapped by the Python function
// (tuples, sparse tensors, an argument the call returned, ...); func and the arguments
// tell it which arguments the call wrote (those come back as they are). The context of a
// batch's call is None: the Python function then makes it as the Python path does
// (the metadata and the batch size).
PyObject* wrap_in_python(PyObject* cls, PyObject* func, PyObject* result, PyObject* context,
                         PyObject* args, PyObject* kwargs) {
  PyObject* wrap = Py_NewRef(g_wrap_outputs);
  PyObject* wrap_args[] = {cls,
                           func,
                           result,
                           context,
                           args != nullptr ? args : Py_None,
                           kwargs != nullptr ? kwargs : Py_None};
  PyObject* out = PyObject_Vectorcall(wrap, wrap_args, 6, nullptr);
  Py_DECREF(wrap);
  return out;
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
  PyObject* carrier = nullptr;
  PyObject* batch_calls = nullptr;
  const long kind = choose_kind(cls, func, types, &carrier, &batch_calls);
  if (kind < 0) return nullptr;
  if (kind == kPython) return python_path(argv, argc);
  if (kind == kPlain) return call_plain(func, args, kwargs);

  // The argument tensors (held: the metadata read below, and the call, may run Python
  // code that drops them), and from them the results' metadata.
  Refs tensors;
  const Walk walk = ArgumentWalk(&tensors).call(args, kwargs);
  if (walk != Walk::kDone) {
    Py_XDECREF(carrier);
    Py_XDECREF(batch_calls);
    return walk == Walk::kError ? nullptr : python_path(argv, argc);
  }
  PyObject* context = Py_None;
  PyObject* size = nullptr;  // the results' batch size, where they take one
  BatchCheck check;          // a batch's call: which results keep the batch (batch_plan.h)
  check.plan = BatchPlan::kKeepAlways;
  if (kind == kWrapMetadata) {
    // (the first carrier's metadata under the "first" policy; a new empty dict for none)
    Carried carried;
    const int read =
        read_carriers(carrier, tensors.items().data(),
                      static_cast<Py_ssize_t>(tensors.items().size()), nullptr, &carried);
    Py_DECREF(carrier);
    context = read < 0 ? nullptr : carried.first != nullptr ? carried.first : PyDict_New();
    size = carried.size;
    int rule = 0;  // 0: this path runs the call (check says what becomes of the batch)
    if (context != nullptr && carried.batch && batch_calls != Py_None) {
      // (the function's entry in the batch registry's table; none: the Python path)
      PyObject* entry = PyDict_GetItemWithError(batch_calls, func);
      Py_XINCREF(entry);
      if (entry == nullptr) {
        rule = PyErr_Occurred() ? -1 : 1;
      } else if (size != nullptr) {  // (the first carrier is the batch: judge the call)
        const BatchArgs batch{carried.holder, carried.samplers, carried.others};
        rule = plan_batch_call(entry, args, kwargs, batch, &check) < 0 ? -1
               : check.plan == BatchPlan::kPython                      ? 1
                                                                       : 0;
      }
      Py_XDECREF(entry);
    }
    Py_DECREF(batch_calls);
    if (context == nullptr || rule != 0) {
      Py_XDECREF(context);
      Py_XDECREF(size);
      return rule < 0 || context == nullptr ? nullptr : python_path(argv, argc);
    }
  } else {
    Py_INCREF(context);
  }
  PyObject* result = call_plain(func, args, kwargs);
  if (result == nullptr) {
    Py_DECREF(context);
    Py_XDECREF(size);
    return nullptr;
  }

  if (Py_TYPE(result) != reinterpret_cast<PyTypeObject*>(g_tensor_type) ||
      THPVariable_Unpack(result).layout() != at::kStrided) {
    PyObject* out;
    if (PyObject_TypeCheck(result, reinterpret_cast<PyTypeObject*>(cls))) {
      out = Py_NewRef(result);  // an in-place call returned its argument
    } else {
      out = wrap_in_python(cls, func, result, size != nullptr ? Py_None : context, args, kwargs);
    }
    Py_DECREF(result);
    Py_DECREF(context);
    Py_XDECREF(size);
    return out;
  }
  for (PyObject* t : tensors.items()) {
    if (t == result) {  // one of its arguments (in place, out=, to(): Python decides)
      PyObject* out =
          wrap_in_python(cls, func, result, size != nullptr ? Py_None : context, args, kwargs);
      Py_DECREF(result);
      Py_DECREF(context);
      Py_XDECREF(size);
      return out;
    }
  }

  // (a result that does not keep the batch takes its metadata whole, as no batch: its
  // batch size None, as the Python path's verdict leaves it, where it has a dim)
  const at::Tensor& plain = THPVariable_Unpack(result);  // (not used once result is given up)
  const bool kept = size != nullptr && result_keeps(check, plain);
  const bool dropped = size != nullptr && !kept && plain.dim() > 0;
  PyObject* out = as_instance(cls, result);
  if (out != nullptr && kind == kWrapMetadata &&
      take_metadata(out, context, kept ? size : nullptr, !dropped) != 0) {
    Py_CLEAR(out);
  }
  Py_DECREF(context);
  Py_XDECREF(size);
  return out;
}

// wrapper_adopt(cls, tensor) -> bool: adopt() for the Python path.
PyObject* adopt_for_python(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 2 || !PyType_Check(argv[0])) {
    PyErr_SetString(PyExc_TypeError, "wrapper_adopt(cls: type, tensor)");
    return nullptr;
  }
  if (g_tensor_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "wrapper_adopt: setup() was not called");
    return nullptr;
  }
  PyObject* result = Py_NewRef(argv[1]);  // (held while its class is set)
  const bool adopted = adopt(argv[0], result);
  Py_DECREF(result);
  return PyBool_FromLong(adopted);
}

PyObject* setup(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if ((argc != 5 && argc != 6) || !PyType_Check(argv[0]) || !PyAnySet_Check(argv[1]) ||
      !PyCallable_Check(argv[2]) || !PyDict_Check(argv[4]) ||
      (argc == 6 && !PyType_Check(argv[5]))) {
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_dispatch_setup(tensor_type, no_wrap: frozenset, wrap_outputs, "
                    "overrides, pytree_nodes: dict, record_type: type = <as before>)");
    return nullptr;
  }
  if (argc == 6 && set_record_type(argv[5]) != 0) return nullptr;
  PyObject** slots[] = {&g_tensor_type, &g_no_wrap, &g_wrap_outputs, &g_overrides, &g_pytree_nodes};
  for (int i = 0; i < 5; ++i) {
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
    {"wrapper_adopt", reinterpret_cast<PyCFunction>(adopt_for_python), METH_FASTCALL,
     "wrapper_adopt(cls, tensor) -> bool: whether a new plain result became an instance of "
     "cls in place (an exact torch.Tensor with no weak reference and no attributes, of a "
     "layout cls can take); the rule of the compiled path, for the Python path's results."},
    {"wrapper_dispatch_setup", reinterpret_cast<PyCFunction>(setup), METH_FASTCALL,
     "wrapper_dispatch_setup(tensor_type, no_wrap, wrap_outputs, overrides, pytree_nodes, "
     "record_type=<as before>): what wrapper_torch_function needs from Python; record_type "
     "is the class of the records (its fields are found by name)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void add_wrapper_dispatch(pybind11::module_& m) {
  struct Name {
    PyObject** slot;
    const char* text;
  };
  for (const Name& name : {Name{&s_fast, "_fast"}, Name{&s_python_path, "_python_torch_function"},
                           Name{&s_value, "value"}, Name{&s_is_enabled_for, "isEnabledFor"},
                           Name{&s_class, "__class__"}, Name{&s_as_subclass, "as_subclass"}}) {
    *name.slot = PyUnicode_InternFromString(name.text);
    if (*name.slot == nullptr) {
      throw pybind11::error_already_set();
    }
  }
  s_info_level = PyLong_FromLong(20);  // logging.INFO
  if (s_info_level == nullptr || PyModule_AddFunctions(m.ptr(), methods) != 0 ||
      add_record_functions(m.ptr()) != 0) {
    throw pybind11::error_already_set();
  }
}

}  // namespace tensortools::python
