// ScalarTensor.__torch_function__ with its most common calls in C.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds scalar_torch_function to the module, with the codes of the calls it answers and the
// rules the Python handlers share with it (see tensortools/types/scalar/ for how they are
// used, and fast_path.py there for the calls it answers).
void add_scalar_dispatch(pybind11::module_& m);

}  // namespace tensortools::python
