// Argument checks shared by every tensortools entry point: the CPU, CUDA and meta kernels
// of an operator call the same check function, so they accept and refuse the same calls.
//
// Each check names the operator and the argument and says what was expected and what
// came. Wrong kinds of tensor (dtype, layout) raise c10::TypeError, which Python sees as
// TypeError; wrong shapes or devices raise c10::ValueError (Python ValueError).
//
// Sizes are read as c10::SymInt (sym_size, sym_sizes), which works on real tensors and on
// the symbolic-shaped fake tensors torch.compile traces with (a comparison there becomes
// a guard on the traced shapes).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <optional>
#include <sstream>
#include <string>

namespace tensortools {

// A tensor argument and the name the user knows it by.
struct Arg {
  const at::Tensor& tensor;
  const char* name;
};

namespace checks {

inline std::string dtype_list(c10::ArrayRef<at::ScalarType> dtypes) {
  std::ostringstream out;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    out << (i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") << dtypes[i];
  }
  return out.str();
}

inline bool dtype_among(at::ScalarType dtype, c10::ArrayRef<at::ScalarType> dtypes) {
  for (auto t : dtypes) {
    if (t == dtype) {
      return true;
    }
  }
  return false;
}

inline void defined(const char* op, const Arg& a) {
  TORCH_CHECK_VALUE(a.tensor.defined(), op, ": '", a.name, "' must be a tensor, got None");
}

inline void strided(const char* op, const Arg& a) {
  TORCH_CHECK_TYPE(a.tensor.layout() == at::kStrided, op, ": '", a.name,
                   "' must be a dense (strided) tensor, got layout ", a.tensor.layout());
}

inline void dim(const char* op, const Arg& a, int64_t expected, const char* meaning) {
  TORCH_CHECK_VALUE(a.tensor.dim() == expected, op, ": '", a.name, "' must be ", expected, "-D (",
                    meaning, "), got ", a.tensor.dim(), "-D with shape ", a.tensor.sym_sizes());
}

inline void shape(const char* op, const Arg& a, c10::SymIntArrayRef expected, const char* meaning) {
  TORCH_CHECK_VALUE(a.tensor.sym_sizes() == expected, op, ": '", a.name, "' must have shape ",
                    expected, " (", meaning, "), got ", a.tensor.sym_sizes());
}

inline void same_size(const char* op, const Arg& a, int64_t dim, const Arg& ref, int64_t ref_dim,
                      const char* meaning) {
  TORCH_CHECK_VALUE(a.tensor.sym_size(dim) == ref.tensor.sym_size(ref_dim), op, ": '", a.name,
                    "' has ", meaning, " ", a.tensor.sym_size(dim), " but '", ref.name, "' has ",
                    ref.tensor.sym_size(ref_dim));
}

inline void dtype_in(const char* op, const Arg& a, c10::ArrayRef<at::ScalarType> allowed) {
  TORCH_CHECK_TYPE(dtype_among(a.tensor.scalar_type(), allowed), op, ": '", a.name,
                   "' must have dtype ", dtype_list(allowed), " on ", a.tensor.device().type(),
                   ", got ", a.tensor.scalar_type());
}

inline void same_dtype(const char* op, const Arg& a, const Arg& ref) {
  TORCH_CHECK_TYPE(a.tensor.scalar_type() == ref.tensor.scalar_type(), op, ": '", a.name,
                   "' must have the same dtype as '", ref.name, "' (", ref.tensor.scalar_type(),
                   "), got ", a.tensor.scalar_type());
}

inline void same_device(const char* op, const Arg& a, const Arg& ref) {
  TORCH_CHECK_VALUE(a.tensor.device() == ref.tensor.device(), op, ": '", a.name,
                    "' must be on the same device as '", ref.name, "' (", ref.tensor.device(),
                    "), got ", a.tensor.device());
}

// The checks every tensor argument of an operator gets: defined, strided, same dtype and
// device as the first one, whose dtype must be one of `allowed`.
inline void common(const char* op, std::initializer_list<Arg> args,
                   c10::ArrayRef<at::ScalarType> allowed) {
  for (const auto& a : args) {
    defined(op, a);
    strided(op, a);
  }
  const Arg& first = *args.begin();
  dtype_in(op, first, allowed);
  for (const auto& a : args) {
    same_dtype(op, a, first);
    same_device(op, a, first);
  }
}

// An optional tensor argument that must match `ref` in dtype and device and have `shape`.
inline void optional_like(const char* op, const std::optional<at::Tensor>& t, const char* name,
                          const Arg& ref, c10::SymIntArrayRef shape, const char* meaning) {
  if (!t.has_value() || !t->defined()) {
    return;
  }
  const Arg a{*t, name};
  strided(op, a);
  same_dtype(op, a, ref);
  same_device(op, a, ref);
  checks::shape(op, a, shape, meaning);
}

}  // namespace checks

// The dtypes each backend's floating-point kernels accept.
inline constexpr at::ScalarType kCpuFloatingTypes[] = {at::kFloat, at::kDouble};
inline constexpr at::ScalarType kCudaFloatingTypes[] = {at::kFloat, at::kDouble, at::kHalf,
                                                        at::kBFloat16};
// Every floating dtype: what an operator made of ATen calls takes on every device.
inline constexpr at::ScalarType kAllFloatingTypes[] = {at::kFloat, at::kDouble, at::kHalf,
                                                       at::kBFloat16};

// The floating dtypes an operator's kernels accept on `device`. A meta tensor (what
// torch.compile traces with) stands for a tensor of any device, so it takes the dtypes of
// every backend: the kernel of the device the call finally runs on refuses the rest.
inline c10::ArrayRef<at::ScalarType> floating_types_for(const at::Device& device) {
  if (device.is_cpu()) {
    return kCpuFloatingTypes;
  }
  return kCudaFloatingTypes;
}

}  // namespace tensortools
