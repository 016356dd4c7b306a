// Which path TensorWrapper's compiled __torch_function__ takes for a call, from the class's
// record (cls._fast, a WrapperRecord of tensortools/dispatch/compiled_path.py, read by
// its fields' names) and the calling thread's state: the gate, defined here once and
// exported as wrapper_path_of for the Python path to ask.
#pragma once

#include <torch/extension.h>

namespace tensortools::python::wrapper {

// Makes `type` (WrapperRecord) the class of the records, finding each field's place by
// its name in type._fields; -1 with an exception set where one is missing.
int set_record_type(PyObject* type);

// The kind of path a call takes (a Kind), and for kWrapMetadata the carrier class and the
// batch calls (new references in *carrier and *batch_calls); -1 with an exception set on
// error.
long choose_kind(PyObject* cls, PyObject* func, PyObject* types, PyObject** carrier,
                 PyObject** batch_calls);

// Adds wrapper_path_of and wrapper_path_kinds to the module; -1 with an exception set on
// error.
int add_record_functions(PyObject* module);

}  // namespace tensortools::python::wrapper
