// Argument checks shared by every tensortools entry point (CPU and CUDA alike).
//
// Each check names the operator and the argument and says what was expected and what
// came. Wrong kinds of tensor (dtype, layout) raise c10::TypeError, which Python sees as
// TypeError; wrong shapes or devices raise c10::ValueError (Python ValueError).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

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

inline void defined(const char* op, const Arg& a) {
  TORCH_CHECK_VALUE(a.tensor.defined(), op, ": '", a.name, "' must be a tensor, got None");
}

inline void strided(const char* op, const Arg& a) {
  TORCH_CHECK_TYPE(
      a.tensor.layout() == at::kStrided, op, ": '", a.name,
      "' must be a dense (strided) tensor, got layout ", a.tensor.layout());
}

inline void dim(const char* op, const Arg& a, int64_t expected, const char* meaning) {
  TORCH_CHECK_VALUE(
      a.tensor.dim() == expected, op, ": '", a.name, "' must be ", expected, "-D (", meaning,
      "), got ", a.tensor.dim(), "-D with shape ", a.tensor.sizes());
}

inline void shape(const char* op, const Arg& a, at::IntArrayRef expected, const char* meaning) {
  TORCH_CHECK_VALUE(
      a.tensor.sizes() == expected, op, ": '", a.name, "' must have shape ", expected, " (",
      meaning, "), got ", a.tensor.sizes());
}

inline void same_size(const char* op, const Arg& a, int64_t dim, const Arg& ref, int64_t ref_dim,
                      const char* meaning) {
  TORCH_CHECK_VALUE(a.tensor.size(dim) == ref.tensor.size(ref_dim), op, ": '", a.name, "' has ",
                    meaning, " ", a.tensor.size(dim), " but '", ref.name, "' has ",
                    ref.tensor.size(ref_dim));
}

inline void dtype_in(const char* op, const Arg& a, c10::ArrayRef<at::ScalarType> allowed) {
  for (auto t : allowed) {
    if (a.tensor.scalar_type() == t) {
      return;
    }
  }
  TORCH_CHECK_TYPE(
      false, op, ": '", a.name, "' must have dtype ", dtype_list(allowed), " on ",
      a.tensor.device().type(), ", got ", a.tensor.scalar_type());
}

inline void same_dtype(const char* op, const Arg& a, const Arg& ref) {
  TORCH_CHECK_TYPE(
      a.tensor.scalar_type() == ref.tensor.scalar_type(), op, ": '", a.name,
      "' must have the same dtype as '", ref.name, "' (", ref.tensor.scalar_type(), "), got ",
      a.tensor.scalar_type());
}

inline void same_device(const char* op, const Arg& a, const Arg& ref) {
  TORCH_CHECK_VALUE(
      a.tensor.device() == ref.tensor.device(), op, ": '", a.name,
      "' must be on the same device as '", ref.name, "' (", ref.tensor.device(), "), got ",
      a.tensor.device());
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

}  // namespace checks

// The dtypes each backend's kernels accept.
inline constexpr at::ScalarType kCpuFloatingTypes[] = {at::kFloat, at::kDouble};
inline constexpr at::ScalarType kCudaFloatingTypes[] = {at::kFloat, at::kDouble, at::kHalf,
                                                        at::kBFloat16};

}  // namespace tensortools
