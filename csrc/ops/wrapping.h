// Integer arithmetic that wraps around as torch's does, without signed overflow (which is
// undefined behaviour in C++, so an optimiser may assume it never happens): computed in
// the unsigned type the operands promote to, then converted back (a conversion to a signed
// type wraps: C++20, and GCC, Clang and NVCC before it). Floating types compute as usual.
#pragma once

#include <c10/macros/Macros.h>

#include <type_traits>

namespace tensortools {

template <typename T>
C10_HOST_DEVICE inline T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<decltype(a + b)>;  // promoted first: int16 + int16 is int
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}

template <typename T>
C10_HOST_DEVICE inline T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<decltype(a * b)>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

}  // namespace tensortools
