// The LLTM over a sequence on CUDA: the operator's entry points. The recurrence runs as one
// persistent kernel per direction where it applies (lltm_sequence_persistent.cuh, planned
// and launched by lltm_sequence_launch.cu), else as the step loop of lltm_sequence.cpp
// with the cell's pointwise kernels (lltm_pointwise.cuh).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../../checks.h"
#include "../lltm.h"
#include "../lltm_sequence.h"
#include "launch.cuh"
#include "lltm_pointwise.cuh"
#include "lltm_sequence_launch.h"

namespace tensortools::lltm {
namespace {

SequenceForwardOutputs lltm_sequence_forward_cuda(const at::Tensor& input,
                                                  const at::Tensor& weights, const at::Tensor& bias,
                                                  const at::Tensor& h0, const at::Tensor& c0) {
  check_sequence_forward_args(input, weights, bias, h0, c0, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  return run_sequence_forward(input, weights, bias, h0, c0, forward_pointwise, &kPersistent);
}

SequenceInferenceOutputs lltm_sequence_inference_cuda(const at::Tensor& input,
                                                      const at::Tensor& weights,
                                                      const at::Tensor& bias, const at::Tensor& h0,
                                                      const at::Tensor& c0) {
  check_sequence_forward_args(input, weights, bias, h0, c0, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  return run_sequence_inference(input, weights, bias, h0, c0, forward_pointwise, &kPersistent);
}

SequenceBackwardOutputs lltm_sequence_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& grad_h_n, const at::Tensor& grad_c_n,
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& h0,
    const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
    std::array<bool, 3> output_mask) {
  check_sequence_backward_args(grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells,
                               gates, kCudaFloatingTypes);
  const c10::cuda::CUDAGuard guard(input.device());
  return run_sequence_backward(grad_output, grad_h_n, grad_c_n, input, weights, h0, output, cells,
                               gates, output_mask, backward_pointwise, &kPersistent);
}

}  // namespace
}  // namespace tensortools::lltm

TORCH_LIBRARY_IMPL(tensortools, CUDA, m) {
  m.impl("lltm_sequence_forward", &tensortools::lltm::lltm_sequence_forward_cuda);
  m.impl("lltm_sequence_backward", &tensortools::lltm::lltm_sequence_backward_cuda);
  m.impl("lltm_sequence_inference", &tensortools::lltm::lltm_sequence_inference_cuda);
}
