// TensorWrapper.__torch_function__ in C for the common call of every wrapper type; every
// other call, and wrapping any result that is not one plain strided tensor, goes to the
// class's Python path (cls._python_torch_function), which defines the behaviour.
// See Note [The compiled paths] in docs/design.md.
//
// What the fast path needs from a class is one record, cls._fast: a WrapperRecord
// (kind, handlers, logger, captures, carrier, batch_rules), whose fields
// tensortools/dispatch/compiled_path.py documents; kind is one of Kind below (exported as
// wrapper_path_kinds, the values of that file's WrapperPath). For batch_rules, see Note
// [Batch rules] in docs/design.md.
//
// Which metadata and batch size the results of WRAP_METADATA take, and how, are the rules
// of metadata_results.h, which the Python path calls too (one definition). When a new
// result changes class in place rather than become an alias is adopt() below, which the
// Python path calls too (exported as wrapper_adopt).
//
// Every object this file uses across a call that can run Python is held by a reference
// of its own, and a list's items are read afresh, by index, against its current size.
// See Note [Python code inside a C call] in docs/design.md.
//
// wrapper_torch_function_eager is the same function with no Python stand-in for
// torch.compile (LoggingTensor: a graph break per call). See Note [The compiled paths]
// ("Under torch.compile") in docs/design.md.
#include "wrapper_dispatch.h"

#include <utility>

#include "metadata_results.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {
namespace {

// Set by setup(): torch.Tensor, the functions whose results are never wrapped, the Python
// output wrapper, the per-thread store of the settings' overrides, and the container
// types torch.utils._pytree takes apart (its SUPPORTED_NODES, read live).
PyObject* g_tensor_type = nullptr;
PyObject* g_no_wrap = nullptr;
PyObject* g_wrap_outputs = nullptr;  // wrap(cls, func, result, context, args, kwargs)
PyObject* g_overrides = nullptr;
PyObject* g_pytree_nodes = nullptr;

// Interned names.
PyObject* s_fast = nullptr;         // "_fast": the class's record
PyObject* s_python_path = nullptr;  // "_python_torch_function"
PyObject* s_value = nullptr;        // a ThreadStore's "value"
PyObject* s_is_enabled_for = nullptr;
PyObject* s_class = nullptr;
PyObject* s_as_subclass = nullptr;
PyObject* s_info_level = nullptr;  // logging.INFO, 20

enum Kind : long { kPython = 0, kWrap = 1, kWrapMetadata = 2, kPlain = 3 };

// The kinds by the names Python's WrapperPath gives them (exported as wrapper_path_kinds:
// one definition).
constexpr std::pair<const char*, long> kKindNames[] = {
    {"PYTHON", kPython}, {"WRAP", kWrap}, {"WRAP_METADATA", kWrapMetadata}, {"PLAIN", kPlain}};

// References owned by this object, released when it goes.
class Refs {
 public:
  Refs() = default;
  Refs(const Refs&) = delete;
  Refs& operator=(const Refs&) = delete;
  ~Refs() {
    for (PyObject* o : items_) Py_DECREF(o);
  }
  void add(PyObject* o) { items_.push_back(Py_NewRef(o)); }
  const c10::SmallVector<PyObject*, 8>& items() const { return items_; }

 private:
  c10::SmallVector<PyObject*, 8> items_;
};

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

// The kind of path a call takes (see the file comment), and for kind 2 the carrier class
// and the batch rules (new references in *carrier and *batch_rules); -1 with an exception
// set on error.
long choose_kind(PyObject* cls, PyObject* func, PyObject* types, PyObject** carrier,
                 PyObject** batch_rules) {
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
  PyObject* record = PyObject_GetAttr(cls, s_fast);  // (held: its items are borrowed)
  if (record == nullptr) return -1;
  long kind = kPython;
  if (PyTuple_Check(record) && PyTuple_GET_SIZE(record) == 6) {
    kind = PyLong_AsLong(PyTuple_GET_ITEM(record, 0));
    PyObject* handlers = PyTuple_GET_ITEM(record, 1);
    PyObject* logger = PyTuple_GET_ITEM(record, 2);
    PyObject* captures = PyTuple_GET_ITEM(record, 3);
    PyObject* klass = PyTuple_GET_ITEM(record, 4);
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
      PyObject* rules = PyTuple_GET_ITEM(record, 5);
      if (PyType_Check(klass) && (rules == Py_None || PyDict_Check(rules))) {
        *carrier = Py_NewRef(klass);
        *batch_rules = Py_NewRef(rules);
      } else {
        ok = 1;
      }
    }
    kind = ok < 0 ? -1 : ok > 0 ? kPython : kind;
  }
  Py_DECREF(record);
  return kind;
}

// How a walk over a call's arguments ended.
enum class Walk { kDone, kPython, kError };

// The walk over a call's arguments that torch.utils._pytree does for the Python path
// (MetadataTensor.context, wrap_outputs): into exact lists and tuples (and the top level
// of the keyword arguments), not into dicts; every tensor found is added to `tensors`.
// kPython where the Python path would take apart a container this file does not (a
// subclass of list or tuple, such as a named tuple; a type registered with pytree;
// nesting deeper than 16) or, through a hostile __hash__ of a metaclass, an error.
class ArgumentWalk {
 public:
  explicit ArgumentWalk(Refs* tensors) : tensors_(tensors) {}

  Walk call(PyObject* args, PyObject* kwargs) {
    if (args != nullptr) {
      const Walk w = sequence(args, 0);
      if (w != Walk::kDone) return w;
    }
    if (kwargs != nullptr) {
      Py_ssize_t pos = 0;
      PyObject* key;
      PyObject* value;
      // (PyDict_Next stays within the dict's current entries if Python code changes it)
      while (PyDict_Next(kwargs, &pos, &key, &value)) {
        const Walk w = item(value, 0);
        if (w != Walk::kDone) return w;
      }
    }
    return Walk::kDone;
  }

 private:
  // seq: an exact tuple or list, held by the caller; an exact list is read afresh at each
  // index, since Python code run meanwhile may have changed it.
  Walk sequence(PyObject* seq, int depth) {
    for (Py_ssize_t i = 0; i < Py_SIZE(seq); ++i) {
      PyObject* x = PyTuple_CheckExact(seq) ? PyTuple_GET_ITEM(seq, i) : PyList_GET_ITEM(seq, i);
      const Walk w = item(x, depth);
      if (w != Walk::kDone) return w;
    }
    return Walk::kDone;
  }

  Walk item(PyObject* x, int depth) {
    if (PyObject_TypeCheck(x, reinterpret_cast<PyTypeObject*>(g_tensor_type))) {
      tensors_->add(x);
      return Walk::kDone;
    }
    if (x == Py_None || PyLong_CheckExact(x) || PyFloat_CheckExact(x) || PyBool_Check(x) ||
        PyUnicode_CheckExact(x) || PyDict_Check(x) || THPSize_Check(x)) {
      return Walk::kDone;  // (a torch.Size holds ints only)
    }
    Py_INCREF(x);  // (held while it is looked at)
    Walk w = Walk::kDone;
    if (PyTuple_CheckExact(x) || PyList_CheckExact(x)) {
      w = depth >= 16 ? Walk::kPython : sequence(x, depth + 1);
    } else if (PyTuple_Check(x) || PyList_Check(x)) {
      w = Walk::kPython;
    } else {
      PyObject* nodes = Py_NewRef(g_pytree_nodes);
      const int node = PyDict_Contains(nodes, reinterpret_cast<PyObject*>(Py_TYPE(x)));
      Py_DECREF(nodes);
      w = node < 0 ? Walk::kError : node > 0 ? Walk::kPython : Walk::kDone;
    }
    Py_DECREF(x);
    return w;
  }

  Refs* tensors_;
};

// func(*args, **kwargs) with __torch_function__ of subclasses disabled (args and kwargs
// may be null). As Python's func(*args, **kwargs) does, func gets keyword arguments of
// its own, a copy: the caller's dict may change while func runs Python code (an
// argument's __index__), and torch's argument parser reads it without references.
PyObject* call_plain(PyObject* func, PyObject* args, PyObject* kwargs) {
  using at::impl::PythonTorchFunctionTLS;
  using at::impl::TorchFunctionDisabledState;
  PyObject* empty = nullptr;
  if (args == nullptr) {
    args = empty = PyTuple_New(0);
    if (empty == nullptr) return nullptr;
  }
  PyObject* own_kwargs = nullptr;
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    own_kwargs = PyDict_Copy(kwargs);
    if (own_kwargs == nullptr) {
      Py_XDECREF(empty);
      return nullptr;
    }
  }
  const TorchFunctionDisabledState old = PythonTorchFunctionTLS::get_disabled_state();
  if (old == TorchFunctionDisabledState::ENABLED) {
    PythonTorchFunctionTLS::set_disabled_state(TorchFunctionDisabledState::SUBCLASSES_DISABLED);
  }
  PyObject* result = PyObject_Call(func, args, own_kwargs);
  PythonTorchFunctionTLS::set_disabled_state(old);
  Py_XDECREF(own_kwargs);
  Py_XDECREF(empty);
  return result;
}

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
  PyObject* batch_rules = nullptr;
  const long kind = choose_kind(cls, func, types, &carrier, &batch_rules);
  if (kind < 0) return nullptr;
  if (kind == kPython) return python_path(argv, argc);
  if (kind == kPlain) return call_plain(func, args, kwargs);

  // The argument tensors (held: the metadata read below, and the call, may run Python
  // code that drops them), and from them the results' metadata.
  Refs tensors;
  const Walk walk = ArgumentWalk(&tensors).call(args, kwargs);
  if (walk != Walk::kDone) {
    Py_XDECREF(carrier);
    Py_XDECREF(batch_rules);
    return walk == Walk::kError ? nullptr : python_path(argv, argc);
  }
  PyObject* context = Py_None;
  PyObject* size = nullptr;  // the results' batch size, where they take one
  if (kind == kWrapMetadata) {
    // (the first carrier's metadata under the "first" policy; a new empty dict for none)
    Carried carried;
    const int read =
        read_carriers(carrier, tensors.items().data(),
                      static_cast<Py_ssize_t>(tensors.items().size()), nullptr, &carried);
    Py_DECREF(carrier);
    context = read < 0 ? nullptr : carried.first != nullptr ? carried.first : PyDict_New();
    size = carried.size;
    int rule = 0;
    if (context != nullptr && carried.batch && batch_rules != Py_None) {
      const int keeps = PyDict_Contains(batch_rules, func);
      rule = keeps < 0 ? -1 : !keeps;
    }
    Py_DECREF(batch_rules);
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

  PyObject* out = as_instance(cls, result);
  if (out != nullptr && kind == kWrapMetadata && take_metadata(out, context, size, true) != 0) {
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
  if (argc != 5 || !PyType_Check(argv[0]) || !PyAnySet_Check(argv[1]) ||
      !PyCallable_Check(argv[2]) || !PyDict_Check(argv[4])) {
    PyErr_SetString(PyExc_TypeError,
                    "wrapper_dispatch_setup(tensor_type, no_wrap: frozenset, wrap_outputs, "
                    "overrides, pytree_nodes: dict)");
    return nullptr;
  }
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
     "wrapper_dispatch_setup(tensor_type, no_wrap, wrap_outputs, overrides, pytree_nodes): "
     "what wrapper_torch_function needs from Python."},
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
  if (s_info_level == nullptr || PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
  pybind11::dict kinds;
  for (const auto& [name, kind] : kKindNames) kinds[name] = kind;
  m.attr("wrapper_path_kinds") = kinds;
}

}  // namespace tensortools::python
