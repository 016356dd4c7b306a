// The batch rule's common verdicts on the compiled path: for a call whose first
// metadata-carrying argument is a batch, what its record in the batch registry says, read
// from the same records the Python path reads (tensortools/dispatch/batch_rules.py: the
// class's batch_calls, COMPILED, maps a function to None for "keep", or to its declared
// Rows or OverDims). The Python path (metadata.batch_settle, batch_verdict.rows_verdict
// and over_dims_verdict) defines every verdict; this file decides the calls whose verdict
// needs nothing but their argument positions, their dims and the result's shape, and
// leaves every other call to the Python path before it runs. tests/test_batch_c_path.py
// holds the two paths to the same results. See Note [Batch rules] in docs/design.md.
#pragma once

#include <torch/extension.h>

#include <cstdint>

namespace tensortools::python {

// What the compiled path does with a batch's call.
enum class BatchPlan {
  kPython,      // the Python path decides (before the call)
  kKeepAlways,  // every result is the batch ("keep")
  kKeepIfRows,  // a result keeps the batch where its dim 0 has the batch's size (else dropped)
  kKeepIfSame,  // ... and it has the batch's number of dims (elementwise)
  kDrop,        // the results are no batch (the batch's metadata whole)
};

struct BatchCheck {
  BatchPlan plan = BatchPlan::kPython;
  int64_t size = 0;  // the batch's dim 0
  int64_t ndim = 0;  // the batch's number of dims
};

// The batch among a call's argument tensors, as read_carriers finds it.
struct BatchArgs {
  PyObject* batch;      // the first carrier that holds metadata, a batch (borrowed)
  Py_ssize_t samplers;  // the argument tensors that hold samples, once per place
  bool others;          // whether one of them is another tensor than `batch`
};

// The plan for func's call from its entry in batch_calls (borrowed; not null), its
// arguments (args and kwargs may be null) and its batch. 0, or -1 with an exception set.
int plan_batch_call(PyObject* entry, PyObject* args, PyObject* kwargs, const BatchArgs& batch,
                    BatchCheck* out);

// Whether a plain result of the call keeps the batch under `check` (kKeepAlways,
// kKeepIfRows or kKeepIfSame; kDrop: never).
bool result_keeps(const BatchCheck& check, const at::Tensor& result);

}  // namespace tensortools::python
