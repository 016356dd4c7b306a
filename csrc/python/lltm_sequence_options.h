// The LLTM sequence's options (csrc/ops/lltm_sequence.h) as Python sets and reads them.
#pragma once

#include <torch/extension.h>

namespace tensortools::python {

// Adds _set_lltm_sequence_options(mode, max_blocks) and _lltm_sequence_options() to the
// module: tensortools/ops/_lltm_sequence_options.py calls them, after checking the values.
void add_lltm_sequence_options(pybind11::module_& m);

}  // namespace tensortools::python
