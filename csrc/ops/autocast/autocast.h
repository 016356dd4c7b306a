// What every operator's autocast kernels share. An autocast kernel runs above autograd, as
// torch's own autocast wrappers do: it casts the arguments where the operator's plain-PyTorch
// maths (tensortools.reference) would have them cast under torch.autocast, then calls the
// operator again with autocast off, so autograd records the casts and the operator, and the
// gradients come back in each argument's own dtype. Each kernel is a template over the
// device type, registered for AutocastCPU and AutocastCUDA, as torchvision's are.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

namespace tensortools::autocast {

// Calls made while one lives see no autocast on `device`: the operator's own kernels, and
// the ATen calls inside them, run in the dtypes they are given.
template <c10::DeviceType device>
struct Off {
  c10::impl::ExcludeDispatchKeyGuard guard{
      at::autocast::get_autocast_dispatch_key_from_device_type(device)};
};

// `t` in `dtype` where autocast would cast it (a floating tensor of `device`, not float64),
// else `t` as it is; a parameter's cast is cached for the autocast region, as torch does.
template <c10::DeviceType device>
at::Tensor cast(at::ScalarType dtype, const at::Tensor& t) {
  return at::autocast::cached_cast(dtype, t, device);
}

template <c10::DeviceType device>
std::optional<at::Tensor> cast(at::ScalarType dtype, const std::optional<at::Tensor>& t) {
  return at::autocast::cached_cast(dtype, t, device);
}

// The operator `tensortools::<name>`, to call through the dispatcher from below autocast.
template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace tensortools::autocast
