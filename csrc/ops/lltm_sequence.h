// The LLTM over a whole sequence: schema-level declarations and the step loops that every
// backend's kernel runs.
//
// Shapes (T steps, B batch, F input features, S state size): input T×B×F, weights
// 3S×(S+F), bias 3S, h0 and c0 B×S. weights = [W_h | W_x] by columns (X = [h | x] in the
// cell), so the gates of step t are
//     gates[t] = (input[t] @ W_x.T + bias) + h[t-1] @ W_h.T
// The first term does not depend on the recurrence: it is one matrix product over all
// T·B rows before the loop; each step adds only the B×S by S×3S state product. Backward
// mirrors it: per step one pointwise pass and one product (the gradient reaching h[t-1]),
// then the gradients of input, weights and bias in one product each over all steps.
//
// lltm_sequence_forward returns (output, h_n, c_n, cells, gates): output T×B×S holds every
// step's h, cells T×B×S every step's cell and gates T×B×3S every step's activated gates;
// the backward needs those and input, weights and h0 (not c0: the cell's gradient does
// not depend on the old cell).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/FunctionRef.h>

#include <array>
#include <cstdint>
#include <tuple>

namespace tensortools::lltm {

using SequenceForwardOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using SequenceBackwardOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
// (output, h_n, c_n): the forward with nothing kept for backward.
using SequenceInferenceOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Calls of the registered operators through the dispatcher (any device, with autograd).
SequenceForwardOutputs lltm_sequence_forward(const at::Tensor& input, const at::Tensor& weights,
                                             const at::Tensor& bias, const at::Tensor& h0,
                                             const at::Tensor& c0);
SequenceBackwardOutputs lltm_sequence_backward(const at::Tensor& grad_output,
                                               const at::Tensor& grad_h_n,
                                               const at::Tensor& grad_c_n, const at::Tensor& input,
                                               const at::Tensor& weights, const at::Tensor& h0,
                                               const at::Tensor& output, const at::Tensor& cells,
                                               const at::Tensor& gates,
                                               std::array<bool, 3> output_mask);

// The outputs, allocated here for every backend's kernel and the meta kernel alike:
// (output, h_n, c_n, cells, gates) and (d_input, d_weights, d_bias, d_h0, d_c0), all
// contiguous, with the options of `input`. `output_mask` says which of the gradients of
// (input, weights, bias) are wanted; the others are undefined (None) and not computed.
SequenceForwardOutputs allocate_sequence_forward(const at::Tensor& input, const at::Tensor& h0);
SequenceInferenceOutputs allocate_sequence_inference(const at::Tensor& input, const at::Tensor& h0);
SequenceBackwardOutputs allocate_sequence_backward(const at::Tensor& input, const at::Tensor& h0,
                                                   std::array<bool, 3> output_mask);

// One step's pointwise pass over B×S (2-D, contiguous tensors): the cell kernels' passes.
// Forward: `gates` (B×3S) holds the pre-activation gates on entry and the activated ones
// on exit. Backward: writes d_gates (B×3S) and d_old_cell.
using ForwardPointwise =
    c10::function_ref<void(const at::Tensor& gates, const at::Tensor& old_cell,
                           const at::Tensor& new_cell, const at::Tensor& new_h)>;
using BackwardPointwise = c10::function_ref<void(
    const at::Tensor& gates, const at::Tensor& new_cell, const at::Tensor& grad_h,
    const at::Tensor& grad_cell, const at::Tensor& d_gates, const at::Tensor& d_old_cell)>;

// A backend's whole recurrence in one launch (the CUDA persistent kernels), tried before the
// per-step loop. Each returns false, having written nothing, where it does not apply to
// the arguments (their shapes, the device's limits); the loop runs then.
//
// forward: `gates` (T×B×3S, contiguous) holds each step's input share of the gates, bias
// included. Runs every step and writes output, h_n and c_n; where `cells` is defined (the
// training forward) also every step's cell into it and the activated gates into `gates`.
// backward: from the saved (gates, cells) and the incoming gradients, writes every step's
// d_gates (T×B×3S) and d_h0, d_c0.
struct Recurrence {
  bool (*forward)(const at::Tensor& gates, const at::Tensor& weights, const at::Tensor& h0,
                  const at::Tensor& c0, const at::Tensor& output, const at::Tensor& h_n,
                  const at::Tensor& c_n, const at::Tensor& cells);
  bool (*backward)(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                   const at::Tensor& grad_c_n, const at::Tensor& weights, const at::Tensor& gates,
                   const at::Tensor& cells, const at::Tensor& d_gates, const at::Tensor& d_h0,
                   const at::Tensor& d_c0);
};

// The whole forward and backward of a sequence, with the products through ATen (so on
// the arguments' device) and the pointwise passes through the backend's function, or the
// backend's `recurrence` where it applies. The arguments must have been checked.
SequenceForwardOutputs run_sequence_forward(const at::Tensor& input, const at::Tensor& weights,
                                            const at::Tensor& bias, const at::Tensor& h0,
                                            const at::Tensor& c0, ForwardPointwise pointwise,
                                            const Recurrence* recurrence = nullptr);
// The forward for inference: the same steps and arithmetic as run_sequence_forward (the
// same bits), but no step's cell is kept (two B×S buffers take turns) and the gates are
// scratch, returned to no one.
SequenceInferenceOutputs run_sequence_inference(const at::Tensor& input, const at::Tensor& weights,
                                                const at::Tensor& bias, const at::Tensor& h0,
                                                const at::Tensor& c0, ForwardPointwise pointwise,
                                                const Recurrence* recurrence = nullptr);
SequenceBackwardOutputs run_sequence_backward(
    const at::Tensor& grad_output, const at::Tensor& grad_h_n, const at::Tensor& grad_c_n,
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& h0,
    const at::Tensor& output, const at::Tensor& cells, const at::Tensor& gates,
    std::array<bool, 3> output_mask, BackwardPointwise pointwise,
    const Recurrence* recurrence = nullptr);

// Which recurrence a backend with one (the CUDA persistent kernels) runs: kAuto, its own
// where it applies and else the per-step loop; kLoop, the loop; kPersistent, its own or an
// error saying why it does not apply. max_blocks caps the persistent grid (0: no cap).
// Process-wide, set from Python (tensortools.ops.set_lltm_sequence_options, which reads
// TENSORTOOLS_LLTM_SEQUENCE and TENSORTOOLS_LLTM_SEQUENCE_BLOCKS once, at import).
enum class SequenceMode : uint8_t { kAuto = 0, kLoop = 1, kPersistent = 2 };
struct SequenceOptions {
  SequenceMode mode = SequenceMode::kAuto;
  int64_t max_blocks = 0;
};
// The options in force (one atomic read: any thread may call it while another sets them).
SequenceOptions sequence_options();
// Sets the options, returning the previous ones; refuses a max_blocks < 0.
SequenceOptions set_sequence_options(SequenceOptions options);

// Validate the arguments (ranks, shapes, dtypes in `allowed`, one device).
void check_sequence_forward_args(const at::Tensor& input, const at::Tensor& weights,
                                 const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                                 c10::ArrayRef<at::ScalarType> allowed);
void check_sequence_backward_args(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                                  const at::Tensor& grad_c_n, const at::Tensor& input,
                                  const at::Tensor& weights, const at::Tensor& h0,
                                  const at::Tensor& output, const at::Tensor& cells,
                                  const at::Tensor& gates, c10::ArrayRef<at::ScalarType> allowed);

}  // namespace tensortools::lltm
