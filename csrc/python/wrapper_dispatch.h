// Python-facing C functions of tensortools._C that are not operators.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds wrapper_torch_function, wrapper_adopt and wrapper_dispatch_setup to the module (see
// tensortools/dispatch/wrapper.py for how they are used).
void add_wrapper_dispatch(pybind11::module_& m);

}  // namespace tensortools::python
