// Autograd of lltm_sequence_inference, the sequence's forward for calls that want no
// derivative (tensortools.ops.lltm_sequence takes it only then): called on inputs that
// require grad, its results' backward raises. Every other operator's autograd (backward,
// tangent formula and batching rule, as torch.func needs them) is registered from Python,
// next to its entry point in tensortools/ops/ (see tensortools/ops/_autograd.py).
#include <torch/autograd.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(tensortools, Autograd, m) {
  m.impl("lltm_sequence_inference", torch::autograd::autogradNotImplementedFallback());
}
