// The batch rule's common verdicts on the compiled path (see batch_plan.h).
#include "batch_plan.h"

#include <torch/csrc/autograd/python_variable.h>

namespace tensortools::python {

namespace {

// A field of a record that is not what its class declares (registration refuses such
// records; a record changed since): the Python path decides, and reports it.
int python_decides() {
  PyErr_Clear();
  return 0;
}

// d modulo ndim, as Python's `d % ndim` (ndim > 0).
int64_t wrapped(int64_t d, int64_t ndim) { return ((d % ndim) + ndim) % ndim; }

// A declared Rows(positions, min_ndim, results): the results' rows are the rows of the
// arguments at `positions` (None: every argument, elementwise). The plan where the
// batch is passed by position at one of them and nowhere else; kPython for the rest
// (by keyword, or also elsewhere: the Python path's verdict reads the binding).
int plan_rows(PyObject* entry, PyObject* args, const BatchArgs& batch, BatchCheck* out) {
  PyObject* positions = PyTuple_GET_ITEM(entry, 0);
  PyObject* results = PyTuple_GET_ITEM(entry, 2);
  if (results != Py_None) return 0;  // (some results keep the batch: the Python path)
  if (positions == Py_None) {
    out->plan = BatchPlan::kKeepIfSame;
    return 0;
  }
  if (!PyTuple_CheckExact(positions)) return 0;
  const long min_ndim = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
  if (min_ndim == -1 && PyErr_Occurred()) return python_decides();
  if (out->ndim < min_ndim) {
    out->plan = BatchPlan::kDrop;
    return 0;
  }
  const Py_ssize_t nargs = args != nullptr ? PyTuple_GET_SIZE(args) : 0;
  Py_ssize_t found = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(positions); ++i) {
    const Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, i));
    if (p == -1 && PyErr_Occurred()) return python_decides();
    if (p >= 0 && p < nargs && PyTuple_GET_ITEM(args, p) == batch.batch) ++found;
  }
  if (found > 0 && found == batch.samplers) out->plan = BatchPlan::kKeepIfRows;
  return 0;
}

// The dims of a declared OverDims as the plan: kDrop where dim 0 is among them or they
// are every dim (None, an empty list), kKeepIfRows where they are other dims, kPython for
// anything else (a tensor, a bool, a name, a NumPy int: the Python path reads them).
BatchPlan plan_of_dims(PyObject* dim, int64_t ndim) {
  if (dim == Py_None) return BatchPlan::kDrop;
  PyObject* const* items = &dim;
  Py_ssize_t n = 1;
  if (PyTuple_CheckExact(dim) || PyList_CheckExact(dim)) {
    items = PySequence_Fast_ITEMS(dim);
    n = PySequence_Fast_GET_SIZE(dim);
    if (n == 0) return BatchPlan::kDrop;
  }
  bool over_samples = false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!PyLong_CheckExact(items[i])) return BatchPlan::kPython;
    int overflow = 0;
    const long long d = PyLong_AsLongLongAndOverflow(items[i], &overflow);
    if (overflow != 0 || (d == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return BatchPlan::kPython;
    }
    over_samples = over_samples || wrapped(d, ndim) == 0;
  }
  return over_samples ? BatchPlan::kDrop : BatchPlan::kKeepIfRows;
}

// A declared OverDims(position, default, names): a call over the dims given at
// `position` or by one of `names` (default `default`). Keywords other than those, keepdim
// and dtype (out=, or a name the binding would place elsewhere) leave it to Python.
int plan_over_dims(PyObject* entry, PyObject* args, PyObject* kwargs, BatchCheck* out) {
  const Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
  if (position == -1 && PyErr_Occurred()) return python_decides();
  if (position < 0) return 0;  // (a class's own table may hold any entry: Python judges it)
  PyObject* names = PyTuple_GET_ITEM(entry, 2);
  if (!PyTuple_CheckExact(names)) return 0;
  PyObject* dim = nullptr;  // (borrowed)
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) return 0;
      const int named = PySequence_Contains(names, key);
      if (named < 0) return -1;
      if (named == 0 && PyUnicode_CompareWithASCIIString(key, "keepdim") != 0 &&
          PyUnicode_CompareWithASCIIString(key, "dtype") != 0) {
        return 0;
      }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names) && dim == nullptr; ++i) {
      dim = PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(names, i));
      if (dim == nullptr && PyErr_Occurred()) return -1;
    }
  }
  if (dim == nullptr) {
    const Py_ssize_t nargs = args != nullptr ? PyTuple_GET_SIZE(args) : 0;
    dim = position < nargs ? PyTuple_GET_ITEM(args, position) : PyTuple_GET_ITEM(entry, 1);
  }
  out->plan = plan_of_dims(dim, out->ndim);
  return 0;
}

}  // namespace

int plan_batch_call(PyObject* entry, PyObject* args, PyObject* kwargs, const BatchArgs& batch,
                    BatchCheck* out) {
  *out = BatchCheck{};
  if (entry == Py_None) {
    out->plan = BatchPlan::kKeepAlways;
    return 0;
  }
  if (batch.others || !THPVariable_Check(batch.batch) || !PyTuple_Check(entry) ||
      PyTuple_GET_SIZE(entry) != 3) {
    return 0;  // (several batches: whether they hold the same samples is Python's to judge)
  }
  const at::Tensor& t = THPVariable_Unpack(batch.batch);
  if (t.dim() == 0) return 0;
  out->ndim = t.dim();
  out->size = t.size(0);
  PyObject* first = PyTuple_GET_ITEM(entry, 0);
  if (PyLong_CheckExact(first)) return plan_over_dims(entry, args, kwargs, out);
  return plan_rows(entry, args, batch, out);
}

bool result_keeps(const BatchCheck& check, const at::Tensor& result) {
  switch (check.plan) {
    case BatchPlan::kKeepAlways:
      return true;
    case BatchPlan::kKeepIfRows:
    case BatchPlan::kKeepIfSame:
      return result.dim() > 0 && result.size(0) == check.size &&
             (check.plan == BatchPlan::kKeepIfRows || result.dim() == check.ndim);
    default:
      return false;
  }
}

}  // namespace tensortools::python
