// The two pieces of a call that TensorWrapper's compiled path runs itself: the walk over
// its arguments (the one torch.utils._pytree does for the Python path) and the plain call.
#pragma once

#include <torch/extension.h>

#include "wrapper_state.h"

namespace tensortools::python::wrapper {

// How a walk over a call's arguments ended.
enum class Walk { kDone, kPython, kError };

// The walk over a call's arguments that torch.utils._pytree does for the Python path
// (MetadataTensor.context, wrap_outputs): into exact lists and tuples (and the top level
// of the keyword arguments), not into dicts; every tensor found is added to `tensors`.
// kPython where the Python path would take apart a container this walk does not (a
// subclass of list or tuple, such as a named tuple; a type registered with pytree;
// nesting deeper than 16) or, through a hostile __hash__ of a metaclass, an error.
class ArgumentWalk {
 public:
  explicit ArgumentWalk(Refs* tensors) : tensors_(tensors) {}
  Walk call(PyObject* args, PyObject* kwargs);

 private:
  Walk sequence(PyObject* seq, int depth);
  Walk item(PyObject* x, int depth);

  Refs* tensors_;
};

// func(*args, **kwargs) with __torch_function__ of subclasses disabled (args and kwargs
// may be null); a new reference, or null with an exception set.
PyObject* call_plain(PyObject* func, PyObject* args, PyObject* kwargs);

}  // namespace tensortools::python::wrapper
