// The extension module tensortools._C: claims the `tensortools` operator namespace (each
// operator's schema is added by its own file in ops/) and holds the Python-facing helpers.
#include <torch/extension.h>
#include <torch/library.h>

#include "ops/autograd/lltm_autograd.h"
#include "python/lltm_sequence_options.h"
#include "python/metadata_results.h"
#include "python/scalar_dispatch.h"
#include "python/wrapper_dispatch.h"
#ifndef WITH_CUDA
#include "ops/cuda_missing.h"
#endif

// Operators are defined with TORCH_LIBRARY_FRAGMENT next to their kernels.
TORCH_LIBRARY(tensortools, m) {}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tensortools compiled kernels; operators are under torch.ops.tensortools";
#ifdef WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
  tensortools::register_missing_cuda_kernels();  // (every operator has registered by now)
#endif
  tensortools::python::add_wrapper_dispatch(m);
  tensortools::python::add_metadata_results(m);
  tensortools::python::add_scalar_dispatch(m);
  tensortools::python::add_lltm_sequence_options(m);
  m.def("lltm_cell_autograd", &tensortools::lltm::lltm_cell_autograd,
        "lltm_cell_autograd(input, weights, bias, old_h, old_cell) -> [new_h, new_cell, gates, X]:"
        " lltm_forward with one C++ autograd node over the kernels (the plain path of "
        "tensortools.ops.lltm)");
}
