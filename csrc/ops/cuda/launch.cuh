// Launch helpers shared by the CUDA kernels. Only c10/cuda headers are used (no
// ATen/cuda/CUDAContext.h, which needs the cuBLAS/cuSPARSE headers), so every .cu file
// also compiles against a CPU build of torch, as CI does.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace tensortools::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill any current GPU, never more
// than the 1-D grid limit; the loop covers the rest.
inline unsigned int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t wanted = (n + threads - 1) / threads;
  return static_cast<unsigned int>(std::clamp<int64_t>(wanted, 1, int64_t{1} << 20));
}

// Whether every index into these tensors fits in 32 bits (faster index arithmetic).
template <typename... Tensors>
bool fits_int32(const Tensors&... ts) {
  return ((ts.numel() < std::numeric_limits<int32_t>::max()) && ...);
}

// for (i = first; i < n; i += stride) over the whole grid.
#define TENSORTOOLS_GRID_STRIDE_LOOP(i, n, index_t)                                      \
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<index_t>(blockDim.x) * gridDim.x)

}  // namespace tensortools::cuda
