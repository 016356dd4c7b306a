// Python-facing C functions of tensortools._C that are not operators.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds metadata_torch_function and metadata_dispatch_setup to the module (see
// tensortools/types/metadata_tensor.py for how they are used).
void add_metadata_dispatch(pybind11::module_& m);

}  // namespace tensortools::python
