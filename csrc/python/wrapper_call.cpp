// The walk over a call's arguments and the plain call of TensorWrapper's compiled path
// (wrapper_call.h). Every object used across a call that can run Python is held by a
// reference of its own, and a list's items are read afresh, by index, against its current
// size. See Note [Python code inside a C call] in docs/design.md.
#include "wrapper_call.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Size.h>

namespace tensortools::python::wrapper {

Walk ArgumentWalk::call(PyObject* args, PyObject* kwargs) {
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

// seq: an exact tuple or list, held by the caller; an exact list is read afresh at each
// index, since Python code run meanwhile may have changed it.
Walk ArgumentWalk::sequence(PyObject* seq, int depth) {
  for (Py_ssize_t i = 0; i < Py_SIZE(seq); ++i) {
    PyObject* x = PyTuple_CheckExact(seq) ? PyTuple_GET_ITEM(seq, i) : PyList_GET_ITEM(seq, i);
    const Walk w = item(x, depth);
    if (w != Walk::kDone) return w;
  }
  return Walk::kDone;
}

Walk ArgumentWalk::item(PyObject* x, int depth) {
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

}  // namespace tensortools::python::wrapper
