// For builds without CUDA kernels (csrc/ops/cuda_missing.cpp).
#pragma once

namespace tensortools {

// Gives every operator of the tensortools namespace that has a CPU kernel of its own and
// no CUDA kernel a CUDA kernel that raises a clear error. Called once, when the module
// loads, after every operator has registered.
void register_missing_cuda_kernels();

}  // namespace tensortools
