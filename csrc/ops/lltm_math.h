// Pointwise maths of the LLTM cell, shared by the CPU and CUDA kernels so that both
// compute the same thing. `T` is the type computed in (float for half types); `M` supplies
// exp, expm1 and tanh (StdMath: the C++ library's, usable in device code too). Always
// inlined: the CPU kernel's vectorised loops need the whole element in them, and GCC's
// own heuristics dropped it from the float32 clones once the file had more callers (a
// call per element: the pointwise part of a 16x128 cell took 172 us instead of 60).
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>

namespace tensortools::lltm {

struct StdMath {
  template <typename T>
  C10_HOST_DEVICE static T exp(T x) {
    return std::exp(x);
  }
  template <typename T>
  C10_HOST_DEVICE static T expm1(T x) {
    return std::expm1(x);
  }
  template <typename T>
  C10_HOST_DEVICE static T tanh(T x) {
    return std::tanh(x);
  }
};

template <typename T, typename M = StdMath>
C10_HOST_DEVICE C10_ALWAYS_INLINE T sigmoid(T x) {
  return T(1) / (T(1) + M::exp(-x));
}

template <typename T, typename M = StdMath>
C10_HOST_DEVICE C10_ALWAYS_INLINE T elu(T x) {
  return x > T(0) ? x : M::expm1(x);
}

// d elu(x)/dx written in terms of y = elu(x): 1 where x > 0, else exp(x) = y + 1.
// (y > 0 exactly when x > 0.) For very negative x, y + 1 keeps only an absolute
// accuracy of one ulp of 1, which is all the gradient needs next to its other terms.
template <typename T>
C10_HOST_DEVICE C10_ALWAYS_INLINE T d_elu_from_output(T y) {
  return y > T(0) ? T(1) : y + T(1);
}

// One element of the forward pass. Takes the three pre-activation gates, returns the
// activated gates through the same references, and the new cell and hidden state.
template <typename T, typename M = StdMath>
C10_HOST_DEVICE C10_ALWAYS_INLINE void forward_element(T& i, T& o, T& c, T old_cell, T& new_cell,
                                                       T& new_h) {
  i = sigmoid<T, M>(i);
  o = sigmoid<T, M>(o);
  c = elu<T, M>(c);
  new_cell = old_cell + c * i;
  new_h = M::tanh(new_cell) * o;
}

// One element of the backward pass, from the activated gates (ig, og, cc), the new cell
// and the incoming gradients. Writes the gradients of the three pre-activation gates and
// of old_cell.
template <typename T, typename M = StdMath>
C10_HOST_DEVICE C10_ALWAYS_INLINE void backward_element(T ig, T og, T cc, T new_cell, T grad_h,
                                                        T grad_cell, T& d_i, T& d_o, T& d_c,
                                                        T& d_old_cell) {
  const T t = M::tanh(new_cell);
  const T d_cell = grad_cell + grad_h * og * (T(1) - t * t);
  d_old_cell = d_cell;
  d_i = d_cell * cc * ig * (T(1) - ig);
  d_o = grad_h * t * og * (T(1) - og);
  d_c = d_cell * ig * d_elu_from_output(cc);
}

}  // namespace tensortools::lltm
