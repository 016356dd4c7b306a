// Compiled only into builds without CUDA kernels: every operator answers CUDA tensors with
// a clear error instead of the dispatcher's generic "could not run ... CUDA backend".
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace {

void built_without_cuda(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK(false, "tensortools was built without CUDA, so ", op.schema().name(),
              " cannot run on CUDA tensors. Rebuild tensortools with a CUDA build of torch "
              "and nvcc present (or FORCE_CUDA=1).");
}

}  // namespace

// Every operator with kernels of its own per backend is listed here (tests check that none
// is missing); those composed of ATen calls (graph_conv, conv_bn2d_eval,
// conv_bn2d_update_stats) run on CUDA through ATen's kernels.
TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  for (const char* name : {"lltm_forward", "lltm_backward", "lltm_sequence_forward",
                           "lltm_sequence_backward", "add_diagonal", "scale", "scale_finite",
                           "axpby", "conv_bn2d_forward", "conv_bn2d_backward"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&built_without_cuda>());
  }
}
