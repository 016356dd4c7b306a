// ScalarTensor.__torch_function__ with its most common calls in C.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds scalar_torch_function to the module (see tensortools/types/scalar_tensor.py for how
// it is used).
void add_scalar_dispatch(pybind11::module_& m);

}  // namespace tensortools::python
