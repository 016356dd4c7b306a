// How the results of a call take MetadataTensor metadata, written once. The compiled path
// (wrapper_dispatch.cpp) applies these rules to its results; every other result gets them
// from the same functions, exported as metadata_carriers and metadata_take, which
// tensortools/types/metadata/ calls (the fallback's context and wrap, the batch rules,
// the batch_size setter):
//   which dicts   the metadata of every carrier (an instance of the carrier class,
//                 MetadataTensor, whatever the class of the call) among the call's argument
//                 tensors, in order, where it is not None; the merge policy makes the
//                 result's of them ("first", the compiled path's, keeps the first);
//   batch size    the first of those carriers passes its batch size on (its `_batch_size`,
//                 None where it is not a batch); whether any carrier is a batch decides
//                 whether the compiled path may run the call (wrapper_dispatch.cpp);
//   taking them   a result takes a shallow copy of the dict (dict(metadata): each result
//                 owns its own) and the batch size where it holds samples: a 0-d result
//                 holds none. This is the one place `_batch_size` is written; Python reads
//                 it through batch_size_of (tensortools/types/metadata/tensor.py) alone.
//
// torch.compile cannot trace C: tensor.py registers a Python stand-in of each export for
// it (torch.compiler.substitute_in_graph), which tests/test_metadata_results.py holds to
// these functions over every kind of input.
//
// Python code can run in the middle of these (a property getter, a dict's __eq__): every
// object used across such code is held by a reference of its own (the tensors by the
// caller).
#include "metadata_results.h"

#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {
namespace {

PyObject* s_metadata = nullptr;    // "metadata"
PyObject* s_batch_size = nullptr;  // "_batch_size": a batch's number of samples along dim 0

// getattr(obj, name, None) as Python reads it: 1 with a new reference in *out, 0 when
// there is no such attribute, -1 with an exception set.
int lookup_attr(PyObject* obj, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

void release(Carried* c) {
  Py_CLEAR(c->first);
  Py_CLEAR(c->size);
}

// metadata_carriers(carrier, tensors) -> (dicts, size): read_carriers for Python.
PyObject* carriers(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 2 || !PyType_Check(argv[0])) {
    PyErr_SetString(PyExc_TypeError, "metadata_carriers(carrier: type, tensors: list)");
    return nullptr;
  }
  PyObject* tensors = PySequence_Tuple(argv[1]);  // (held: the list may change meanwhile)
  if (tensors == nullptr) return nullptr;
  PyObject* found = PyList_New(0);
  Carried carried;
  if (found == nullptr || read_carriers(argv[0], PySequence_Fast_ITEMS(tensors),
                                        PyTuple_GET_SIZE(tensors), found, &carried) < 0) {
    Py_XDECREF(found);
    Py_DECREF(tensors);
    return nullptr;
  }
  Py_DECREF(tensors);
  Py_XDECREF(carried.first);
  PyObject* size = carried.size != nullptr ? carried.size : Py_NewRef(Py_None);
  return Py_BuildValue("(NN)", found, size);
}

// metadata_take(result, metadata, size, new) -> None: take_metadata for Python.
PyObject* take(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 4) {
    PyErr_SetString(PyExc_TypeError, "metadata_take(result, metadata, size, new)");
    return nullptr;
  }
  if (!THPVariable_Check(argv[0])) {
    PyErr_Format(PyExc_TypeError, "metadata_take: 'result' must be a tensor, got %s",
                 Py_TYPE(argv[0])->tp_name);
    return nullptr;
  }
  const int fresh = PyObject_IsTrue(argv[3]);
  if (fresh < 0) return nullptr;
  PyObject* result = Py_NewRef(argv[0]);  // (held while its setters run)
  const int done = take_metadata(result, argv[1], argv[2], fresh != 0);
  Py_DECREF(result);
  if (done < 0) return nullptr;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"metadata_carriers", reinterpret_cast<PyCFunction>(carriers), METH_FASTCALL,
     "metadata_carriers(carrier, tensors) -> (dicts, size): the metadata of every instance of "
     "carrier among tensors that holds any, in order, and the batch size of the first (None "
     "where it is not a batch)."},
    {"metadata_take", reinterpret_cast<PyCFunction>(take), METH_FASTCALL,
     "metadata_take(result, metadata, size, new): result takes a copy of metadata (None: "
     "it keeps its own) and the batch size `size` where it holds samples (size not None, "
     "result not 0-d); else it is no batch (nothing written where `new`)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int read_carriers(PyObject* carrier, PyObject* const* tensors, Py_ssize_t n, PyObject* found,
                  Carried* out) {
  *out = Carried{};
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* t = tensors[i];
    if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(carrier))) continue;
    PyObject* metadata = nullptr;
    PyObject* size = nullptr;
    if (lookup_attr(t, s_metadata, &metadata) < 0 || lookup_attr(t, s_batch_size, &size) < 0 ||
        (found != nullptr && metadata != nullptr && metadata != Py_None &&
         PyList_Append(found, metadata) < 0)) {
      Py_XDECREF(metadata);
      Py_XDECREF(size);
      release(out);
      return -1;
    }
    if (size == Py_None) Py_CLEAR(size);
    out->batch = out->batch || size != nullptr;
    if (metadata == Py_None) Py_CLEAR(metadata);
    if (metadata != nullptr && out->first == nullptr) {
      out->first = metadata;
      out->size = size;
    } else {
      Py_XDECREF(metadata);
      Py_XDECREF(size);
    }
  }
  return 0;
}

int take_metadata(PyObject* result, PyObject* metadata, PyObject* size, bool fresh) {
  const bool holds_samples =
      size != nullptr && size != Py_None && THPVariable_Unpack(result).dim() > 0;
  if (metadata != nullptr && metadata != Py_None) {
    PyObject* copy = PyDict_CheckExact(metadata)
                         ? PyDict_Copy(metadata)
                         : PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), metadata);
    const int set = copy == nullptr ? -1 : PyObject_SetAttr(result, s_metadata, copy);
    Py_XDECREF(copy);
    if (set != 0) return -1;
  }
  if (holds_samples) return PyObject_SetAttr(result, s_batch_size, size);
  return fresh ? 0 : PyObject_SetAttr(result, s_batch_size, Py_None);
}

void add_metadata_results(pybind11::module_& m) {
  s_metadata = PyUnicode_InternFromString("metadata");
  s_batch_size = PyUnicode_InternFromString("_batch_size");
  if (s_metadata == nullptr || s_batch_size == nullptr ||
      PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
}

}  // namespace tensortools::python
