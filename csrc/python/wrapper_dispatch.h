// Python-facing C functions of tensortools._C that are not operators.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds wrapper_torch_function(_eager), wrapper_adopt, wrapper_dispatch_setup,
// wrapper_path_of and wrapper_path_kinds to the module (see
// tensortools/dispatch/compiled_path.py for how they are used).
void add_wrapper_dispatch(pybind11::module_& m);

}  // namespace tensortools::python
