// The rules of metadata_results.h as Python calls them: metadata_carriers, metadata_take,
// metadata_batch_size (and metadata_setup, the class it reads).
#include "metadata_results.h"

namespace tensortools::python {
namespace {

PyObject* g_class = nullptr;  // MetadataTensor, once metadata_setup has been called

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

// metadata_batch_size(t): the batch size of a MetadataTensor batch, None for anything else.
PyObject* batch_size_of(PyObject* /*module*/, PyObject* t) {
  if (g_class == nullptr || !PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(g_class))) {
    Py_RETURN_NONE;
  }
  PyObject* size = nullptr;
  if (read_batch_size(t, &size) < 0) return nullptr;
  return size != nullptr ? size : Py_NewRef(Py_None);
}

// metadata_setup(MetadataTensor): the class whose instances metadata_batch_size reads.
PyObject* setup(PyObject* /*module*/, PyObject* cls) {
  if (!PyType_Check(cls)) {
    PyErr_SetString(PyExc_TypeError, "metadata_setup(cls: type)");
    return nullptr;
  }
  Py_XSETREF(g_class, Py_NewRef(cls));
  Py_RETURN_NONE;
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
    {"metadata_batch_size", reinterpret_cast<PyCFunction>(batch_size_of), METH_O,
     "metadata_batch_size(t): the batch size of a MetadataTensor batch (its `_batch_size`), "
     "None for anything else."},
    {"metadata_setup", reinterpret_cast<PyCFunction>(setup), METH_O,
     "metadata_setup(MetadataTensor): the class metadata_batch_size reads."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void add_metadata_results(pybind11::module_& m) {
  metadata_names::metadata = PyUnicode_InternFromString("metadata");
  metadata_names::batch_size = PyUnicode_InternFromString("_batch_size");
  if (metadata_names::metadata == nullptr || metadata_names::batch_size == nullptr ||
      PyModule_AddFunctions(m.ptr(), methods) != 0) {
    throw pybind11::error_already_set();
  }
}

}  // namespace tensortools::python
