// What the files of TensorWrapper's compiled path share (wrapper_dispatch.cpp,
// wrapper_record.cpp, wrapper_call.cpp): the objects wrapper_dispatch_setup hands over, the
// interned names, the kinds of path, and the record's fields by name.
#pragma once

#include <torch/extension.h>

#include <c10/util/SmallVector.h>

namespace tensortools::python::wrapper {

// Set by wrapper_dispatch_setup: torch.Tensor, the functions whose results are never
// wrapped, the Python output wrapper, the per-thread store of the settings' overrides, the
// container types torch.utils._pytree takes apart (its SUPPORTED_NODES, read live), and
// the class of the records (compiled_path.WrapperRecord).
inline PyObject* g_tensor_type = nullptr;
inline PyObject* g_no_wrap = nullptr;
inline PyObject* g_wrap_outputs = nullptr;  // wrap(cls, func, result, context, args, kwargs)
inline PyObject* g_overrides = nullptr;
inline PyObject* g_pytree_nodes = nullptr;
inline PyObject* g_record_type = nullptr;

// Interned by add_wrapper_dispatch.
inline PyObject* s_fast = nullptr;         // "_fast": the class's record
inline PyObject* s_python_path = nullptr;  // "_python_torch_function"
inline PyObject* s_value = nullptr;        // a ThreadStore's "value"
inline PyObject* s_is_enabled_for = nullptr;
inline PyObject* s_class = nullptr;
inline PyObject* s_as_subclass = nullptr;
inline PyObject* s_info_level = nullptr;  // logging.INFO, 20

// The paths a class's common call takes (exported as wrapper_path_kinds, the values of
// Python's WrapperPath: one definition).
enum Kind : long { kPython = 0, kWrap = 1, kWrapMetadata = 2, kPlain = 3 };

// The fields of a record that the compiled path reads, by their names in WrapperRecord;
// set_record_type finds each one's place in the record once, from the class's _fields.
enum Field { kKindField, kHandlers, kLogger, kCaptures, kCarrier, kBatchCalls, kFieldCount };
inline constexpr const char* kFieldNames[kFieldCount] = {"kind",     "handlers", "logger",
                                                         "captures", "carrier",  "batch_calls"};
inline Py_ssize_t g_field_index[kFieldCount] = {};

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

}  // namespace tensortools::python::wrapper
