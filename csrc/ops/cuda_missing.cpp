// Compiled only into builds without CUDA kernels: every operator answers CUDA tensors with
// a clear error instead of the dispatcher's generic "could not run ... CUDA backend".
#include "cuda_missing.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

namespace tensortools {
namespace {

void built_without_cuda(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK(false, "tensortools was built without CUDA, so ", op.schema().name(),
              " cannot run on CUDA tensors. Rebuild tensortools with a CUDA build of torch "
              "and nvcc present (or FORCE_CUDA=1).");
}

}  // namespace

void register_missing_cuda_kernels() {
  // The operators are found, not listed: every operator of the namespace with a CPU
  // kernel of its own and none for CUDA (those composed of ATen calls, registered for a
  // Composite key, run on CUDA through ATen's kernels and are left alone).
  static auto* library = new torch::Library(torch::Library::IMPL, "tensortools",
                                            c10::DispatchKey::CUDA, __FILE__, __LINE__);
  const std::string prefix = "tensortools::";
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind(prefix, 0) != 0) continue;
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) {
      continue;
    }
    std::string own = name.name.substr(prefix.size());
    if (!name.overload_name.empty()) own += "." + name.overload_name;
    library->impl(own.c_str(), torch::CppFunction::makeFromBoxedFunction<&built_without_cuda>());
  }
}

}  // namespace tensortools
