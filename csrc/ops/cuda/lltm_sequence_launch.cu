// The LLTM sequence's persistent kernels planned and launched (lltm_sequence_launch.h).
//
// Where they do not apply (state too large for shared memory, or a device without
// cooperative launch) the step loop of lltm_sequence.cpp runs with the cell's pointwise
// kernels. The sequence options choose: mode loop forces that loop, persistent forces the
// persistent kernels (an error where they do not apply), for tests and benchmarks of both
// paths; max_blocks caps their grid (by default one block per multiprocessor, or per
// column of a smaller state).
#include "lltm_sequence_launch.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "launch.cuh"
#include "lltm_sequence_persistent.cuh"

namespace tensortools::lltm {
namespace {

using persistent::kThreads;
using persistent::sequence_backward_kernel;
using persistent::sequence_forward_kernel;

// How a persistent launch is laid out: `blocks` blocks of kThreads, each owning `cols`
// columns of the state, with `smem` bytes of shared memory; or, where `why_not` is not
// empty, why there is none (the reason, for the forced mode's error).
struct Plan {
  int blocks = 0;
  int cols = 0;
  size_t smem = 0;
  std::string why_not;
};

// The plan for `kernel` on `device` over state size S, whose shared memory holds `fixed`
// values plus `per_col` per column owned, with the grid capped at `max_blocks` (0: no cap).
// The state's columns are spread over at most one block per multiprocessor. The caller
// holds the lock of the plans and `kernel`'s dynamic shared memory limit is raised here
// (only ever raised: a plan made before keeps its launch valid).
Plan make_plan(int device, const void* kernel, int64_t S, int64_t fixed, int64_t per_col,
               size_t value_size, int64_t max_blocks, std::map<const void*, size_t>& smem_set) {
  Plan plan;
  int sms = 0, max_smem = 0, cooperative = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (cooperative == 0) {
    plan.why_not = "the device has no cooperative launch";
    return plan;
  }
  int64_t most_blocks = std::min<int64_t>(S, sms);
  // Fewer blocks: cheaper barriers, more work each (scripts/lltm_blocks.py measures it).
  if (max_blocks > 0) {
    most_blocks = std::clamp<int64_t>(max_blocks, 1, most_blocks);
  }
  const int64_t cols = (S + most_blocks - 1) / most_blocks;
  const int64_t smem = (fixed + per_col * cols) * static_cast<int64_t>(value_size);
  if (smem > max_smem) {
    plan.why_not = "its state needs " + std::to_string(smem) +
                   " bytes of shared memory per block, more than the device's " +
                   std::to_string(max_smem);
    return plan;
  }
  plan.cols = static_cast<int>(cols);
  plan.blocks = static_cast<int>((S + cols - 1) / cols);
  plan.smem = static_cast<size_t>(smem);
  size_t& limit = smem_set[kernel];
  if (plan.smem > limit) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(plan.smem)));
    limit = plan.smem;
  }
  int per_sm = 0;
  C10_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, plan.smem));
  if (static_cast<int64_t>(per_sm) * sms < plan.blocks) {
    plan.why_not = "its " + std::to_string(plan.blocks) + " blocks cannot all be resident at once";
  }
  return plan;
}

// The plan for `kernel` on `device`, the current one (see make_plan), made on the first
// call for these arguments and looked up after (plans are never removed: the reference
// stays valid).
// `largest_index` is checked on every call: it depends on the sequence's length, which the
// plan does not.
const Plan& plan_launch(int device, const void* kernel, int64_t S, int64_t fixed, int64_t per_col,
                        size_t value_size, int64_t largest_index, int64_t max_blocks) {
  if (largest_index >= std::numeric_limits<int>::max()) {
    static const Plan too_large{0, 0, 0, "the tensors have 2^31 elements or more"};
    return too_large;
  }
  using Key = std::tuple<int, const void*, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static std::map<Key, Plan> plans;
  // The dynamic shared memory limit set on each (device, kernel).
  static std::map<int, std::map<const void*, size_t>> smem_set;
  const Key key{device, kernel, S, fixed, per_col, max_blocks};
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    found = plans
                .emplace(key, make_plan(device, kernel, S, fixed, per_col, value_size, max_blocks,
                                        smem_set[device]))
                .first;
  }
  return found->second;
}

// Whether to run the persistent kernel, given the plan (an empty why_not: it applies).
bool use_persistent(SequenceMode mode, const Plan& plan, const char* op) {
  if (mode == SequenceMode::kLoop) {
    return false;
  }
  TORCH_CHECK(mode != SequenceMode::kPersistent || plan.why_not.empty(), op,
              ": the LLTM sequence mode is 'persistent' (tensortools.ops."
              "set_lltm_sequence_options, TENSORTOOLS_LLTM_SEQUENCE), but the persistent "
              "kernel does not apply: ",
              plan.why_not);
  return plan.why_not.empty();
}

void launch(const void* kernel, const Plan& plan, void** args) {
  C10_CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, plan.blocks, kThreads, args, plan.smem,
                                             c10::cuda::getCurrentCUDAStream()));
}

bool persistent_forward(const at::Tensor& gates, const at::Tensor& weights_, const at::Tensor& h0_,
                        const at::Tensor& c0_, const at::Tensor& output, const at::Tensor& h_n,
                        const at::Tensor& c_n, const at::Tensor& cells) {
  const SequenceOptions options = sequence_options();
  if (options.mode == SequenceMode::kLoop) {
    return false;
  }
  const int T = static_cast<int>(gates.size(0)), B = static_cast<int>(gates.size(1));
  const int S = static_cast<int>(h0_.size(1));
  const at::Tensor weights = weights_.contiguous(), h0 = h0_.contiguous(), c0 = c0_.contiguous();
  int64_t ldw = weights.size(1);
  const bool keep = cells.defined();
  bool ran = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_sequence_persistent_forward", [&] {
        using opmath_t = at::opmath_type<scalar_t>;
        const void* kernel =
            keep ? reinterpret_cast<const void*>(&sequence_forward_kernel<scalar_t, true>)
                 : reinterpret_cast<const void*>(&sequence_forward_kernel<scalar_t, false>);
        const Plan& plan = plan_launch(
            gates.get_device(), kernel, S, int64_t{B} * S, 3 * int64_t{S} + B, sizeof(opmath_t),
            std::max(gates.numel(), weights.numel()), options.max_blocks);
        if (!use_persistent(options.mode, plan, "lltm_sequence")) {
          return;
        }
        scalar_t* gates_p = gates.data_ptr<scalar_t>();
        const scalar_t* w_p = weights.const_data_ptr<scalar_t>();
        const scalar_t* h0_p = h0.const_data_ptr<scalar_t>();
        const scalar_t* c0_p = c0.const_data_ptr<scalar_t>();
        scalar_t* out_p = output.data_ptr<scalar_t>();
        scalar_t* h_n_p = h_n.data_ptr<scalar_t>();
        scalar_t* c_n_p = c_n.data_ptr<scalar_t>();
        scalar_t* cells_p = keep ? cells.data_ptr<scalar_t>() : nullptr;
        int T_ = T, B_ = B, S_ = S, cols = plan.cols;
        void* args[] = {&gates_p, &w_p,     &ldw, &h0_p, &c0_p, &out_p, &h_n_p,
                        &c_n_p,   &cells_p, &T_,  &B_,   &S_,   &cols};
        launch(kernel, plan, args);
        ran = true;
      });
  return ran;
}

bool persistent_backward(const at::Tensor& grad_output_, const at::Tensor& grad_h_n_,
                         const at::Tensor& grad_c_n_, const at::Tensor& weights_,
                         const at::Tensor& gates, const at::Tensor& cells,
                         const at::Tensor& d_gates, const at::Tensor& d_h0,
                         const at::Tensor& d_c0) {
  const SequenceOptions options = sequence_options();
  if (options.mode == SequenceMode::kLoop) {
    return false;
  }
  const int T = static_cast<int>(gates.size(0)), B = static_cast<int>(gates.size(1));
  const int S = static_cast<int>(d_h0.size(1));
  const at::Tensor grad_output = grad_output_.contiguous(), grad_h_n = grad_h_n_.contiguous(),
                   grad_c_n = grad_c_n_.contiguous(), weights = weights_.contiguous();
  int64_t ldw = weights.size(1);
  bool ran = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_sequence_persistent_backward", [&] {
        using opmath_t = at::opmath_type<scalar_t>;
        const void* kernel = reinterpret_cast<const void*>(&sequence_backward_kernel<scalar_t>);
        const Plan& plan = plan_launch(
            gates.get_device(), kernel, S, int64_t{B} * 3 * S, 3 * int64_t{S} + B, sizeof(opmath_t),
            std::max(gates.numel(), weights.numel()), options.max_blocks);
        if (!use_persistent(options.mode, plan, "lltm_sequence_backward")) {
          return;
        }
        const scalar_t* go_p = grad_output.const_data_ptr<scalar_t>();
        const scalar_t* ghn_p = grad_h_n.const_data_ptr<scalar_t>();
        const scalar_t* gcn_p = grad_c_n.const_data_ptr<scalar_t>();
        const scalar_t* w_p = weights.const_data_ptr<scalar_t>();
        const scalar_t* gates_p = gates.const_data_ptr<scalar_t>();
        const scalar_t* cells_p = cells.const_data_ptr<scalar_t>();
        scalar_t* dg_p = d_gates.data_ptr<scalar_t>();
        scalar_t* dh0_p = d_h0.data_ptr<scalar_t>();
        scalar_t* dc0_p = d_c0.data_ptr<scalar_t>();
        int T_ = T, B_ = B, S_ = S, cols = plan.cols;
        void* args[] = {&go_p, &ghn_p, &gcn_p, &w_p, &ldw, &gates_p, &cells_p,
                        &dg_p, &dh0_p, &dc0_p, &T_,  &B_,  &S_,      &cols};
        launch(kernel, plan, args);
        ran = true;
      });
  return ran;
}

}  // namespace

const Recurrence kPersistent{persistent_forward, persistent_backward};

}  // namespace tensortools::lltm
