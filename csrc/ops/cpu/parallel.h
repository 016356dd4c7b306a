// Helpers for at::parallel_for shared by the CPU kernels.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace tensortools::cpu {

// Items per task when each item (a row, a plane) holds `item_size` elements: enough
// elements that a task outweighs the cost of waking a thread.
inline int64_t grain_for(int64_t item_size) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, item_size));
}

}  // namespace tensortools::cpu
