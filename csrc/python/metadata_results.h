// How the results of a call take MetadataTensor metadata: the rules, written once (see
// metadata_results.cpp).
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// What the carriers of metadata among a call's argument tensors give its results.
struct Carried {
  PyObject* first = nullptr;  // the first carrier's metadata (a new reference), or nullptr
  PyObject* size = nullptr;   // that carrier's batch size (a new reference), or nullptr
  bool batch = false;         // whether any carrier is a batch
};

// Reads every carrier (an instance of `carrier`) among tensors[0, n), in order: its
// metadata and its batch size. found: a list each metadata that is not None is appended
// to, or nullptr. 0, or -1 with an exception set and nothing held in *out.
int read_carriers(PyObject* carrier, PyObject* const* tensors, Py_ssize_t n, PyObject* found,
                  Carried* out);

// `result` (a tensor) takes a copy of `metadata` (nullptr or None: it keeps its own) and the
// batch size `size` where it holds samples (size not nullptr or None, result not 0-d);
// otherwise it is no batch: `_batch_size` set to None, unless `fresh` (a result just made,
// with no batch size to clear). 0, or -1 with an exception set.
int take_metadata(PyObject* result, PyObject* metadata, PyObject* size, bool fresh);

// Adds metadata_carriers and metadata_take (the two rules above, as Python calls them).
void add_metadata_results(pybind11::module_& m);

}  // namespace tensortools::python
