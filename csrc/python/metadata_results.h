// How the results of a call take MetadataTensor metadata, written once. The compiled path
// (wrapper_dispatch.cpp) applies these rules to its results; every other result gets them
// from the same functions, exported by metadata_results.cpp as metadata_carriers,
// metadata_take and metadata_batch_size, which tensortools/types/metadata/ calls (the fallback's
// context and wrap, the batch rules, the batch_size setter, every read of a batch size):
//   which dicts   the metadata of every carrier (an instance of the carrier class,
//                 MetadataTensor, whatever the class of the call) among the call's argument
//                 tensors, in order, where it is not None; the merge policy makes the
//                 result's of them ("first", the compiled path's, keeps the first);
//   batch size    the first of those carriers passes its batch size on (its `_batch_size`,
//                 None where it is not a batch); whether any carrier is a batch decides
//                 whether the compiled path may run the call (wrapper_dispatch.cpp);
//   taking them   a result takes a shallow copy of the dict (dict(metadata): each result
//                 owns its own) and the batch size where it holds samples: a 0-d result
//                 holds none. take_metadata is the one place `_batch_size` is written,
//                 read_batch_size the one place it is read (Python reads it through
//                 metadata_batch_size: batch_size_of in tensortools/types/metadata/).
//
// torch.compile cannot trace C: tensortools/types/metadata/results.py registers a Python
// stand-in of each export for it (torch.compiler.substitute_in_graph), which
// tests/test_metadata_results.py holds to these functions over every kind of input.
//
// (Defined here, inline, so that the compiled path's calls cost what its own code did.)
//
// Python code can run in the middle of these (a property getter, a dict's __eq__): every
// object used across such code is held by a reference of its own (the tensors by the
// caller).
#pragma once

#include <torch/csrc/autograd/python_variable.h>
#include <torch/extension.h>

namespace tensortools::python {

namespace metadata_names {
// Interned by add_metadata_results.
inline PyObject* metadata = nullptr;    // "metadata"
inline PyObject* batch_size = nullptr;  // "_batch_size": a batch's number of samples along dim 0
}  // namespace metadata_names

// getattr(obj, name, None) as Python reads it: 1 with a new reference in *out, 0 when
// there is no such attribute, -1 with an exception set.
inline int lookup_optional_attr(PyObject* obj, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

// getattr(t, "_batch_size", None), the one read of a batch size: 1 with a new reference in
// *size (nullptr where it is None), 0 where t has none, -1 with an exception set.
inline int read_batch_size(PyObject* t, PyObject** size) {
  const int found = lookup_optional_attr(t, metadata_names::batch_size, size);
  if (found > 0 && *size == Py_None) Py_CLEAR(*size);
  return found;
}

// What the carriers of metadata among a call's argument tensors give its results.
struct Carried {
  PyObject* first = nullptr;   // the first carrier's metadata (a new reference), or nullptr
  PyObject* size = nullptr;    // that carrier's batch size (a new reference), or nullptr
  bool batch = false;          // whether any carrier is a batch
  PyObject* holder = nullptr;  // the first carrier, whose metadata `first` is (borrowed)
  Py_ssize_t samplers = 0;     // the carriers that are batches, once per place
  bool others = false;         // whether one of those is another tensor than `holder`

  void release() {
    Py_CLEAR(first);
    Py_CLEAR(size);
  }
};

// Reads every carrier (an instance of `carrier`) among tensors[0, n), in order: its
// metadata and its batch size. found: a list each metadata that is not None is appended
// to, or nullptr. 0, or -1 with an exception set and nothing held in *out.
inline int read_carriers(PyObject* carrier, PyObject* const* tensors, Py_ssize_t n, PyObject* found,
                         Carried* out) {
  *out = Carried{};
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* t = tensors[i];
    if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(carrier))) continue;
    PyObject* metadata = nullptr;
    PyObject* size = nullptr;
    if (lookup_optional_attr(t, metadata_names::metadata, &metadata) < 0 ||
        read_batch_size(t, &size) < 0 ||
        (found != nullptr && metadata != nullptr && metadata != Py_None &&
         PyList_Append(found, metadata) < 0)) {
      Py_XDECREF(metadata);
      Py_XDECREF(size);
      out->release();
      return -1;
    }
    out->batch = out->batch || size != nullptr;
    if (metadata == Py_None) Py_CLEAR(metadata);
    if (size != nullptr) {
      ++out->samplers;
      // (a batch before the holder, or after it and not it)
      out->others = out->others || (out->first != nullptr ? t != out->holder : metadata == nullptr);
    }
    if (metadata != nullptr && out->first == nullptr) {
      out->first = metadata;
      out->size = size;
      out->holder = t;
    } else {
      Py_XDECREF(metadata);
      Py_XDECREF(size);
    }
  }
  return 0;
}

// `result` (a tensor) takes a copy of `metadata` (nullptr or None: it keeps its own) and the
// batch size `size` where it holds samples (size not nullptr or None, result not 0-d);
// otherwise it is no batch: `_batch_size` set to None, unless `fresh` (a result just made,
// with no batch size to clear). 0, or -1 with an exception set.
inline int take_metadata(PyObject* result, PyObject* metadata, PyObject* size, bool fresh) {
  const bool holds_samples =
      size != nullptr && size != Py_None && THPVariable_Unpack(result).dim() > 0;
  if (metadata != nullptr && metadata != Py_None) {
    PyObject* copy = PyDict_CheckExact(metadata)
                         ? PyDict_Copy(metadata)
                         : PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), metadata);
    const int set = copy == nullptr ? -1 : PyObject_SetAttr(result, metadata_names::metadata, copy);
    Py_XDECREF(copy);
    if (set != 0) return -1;
  }
  if (holds_samples) return PyObject_SetAttr(result, metadata_names::batch_size, size);
  return fresh ? 0 : PyObject_SetAttr(result, metadata_names::batch_size, Py_None);
}

// Adds metadata_carriers and metadata_take (the two rules above, as Python calls them),
// metadata_batch_size (read_batch_size of a MetadataTensor) and metadata_setup (the class
// it reads).
void add_metadata_results(pybind11::module_& m);

}  // namespace tensortools::python
