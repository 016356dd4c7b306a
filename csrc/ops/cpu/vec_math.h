// float32 exp, expm1 and tanh written without branches or library calls, so that a loop
// calling them auto-vectorises (the C library's scalar versions keep it scalar). Accuracy:
// a few ulp over the whole range (Cody-Waite reduction and the Cephes polynomials);
// NaN propagates; results saturate like the exact functions (exp(x) is clamped to
// [exp(-87), exp(88)], which changes nothing that sigmoid, tanh or elu return in float).
#pragma once

#include <bit>
#include <cstdint>

namespace tensortools::cpu {

#if defined(__GNUC__)
#define TENSORTOOLS_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TENSORTOOLS_ALWAYS_INLINE inline
#endif

struct FastMathF32 {
  static TENSORTOOLS_ALWAYS_INLINE float exp(float x) {
    const bool nan = x != x;
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    xc = nan ? 0.0f : xc;
    // n = round(x / ln 2), via the 1.5 * 2^23 trick (|n| < 2^22).
    const float magic = 12582912.0f;
    const float n = (xc * 1.44269504088896341f + magic) - magic;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
    const float y = p * scale;
    return nan ? x : y;
  }

  static TENSORTOOLS_ALWAYS_INLINE float expm1(float x) {
    // Near 0, exp(x) - 1 cancels: use the Taylor series there (|x| < 0.35: the first
    // omitted term is under 2e-8 relative).
    float t = x * (1.0f / 5040.0f) + (1.0f / 720.0f);
    t = t * x + (1.0f / 120.0f);
    t = t * x + (1.0f / 24.0f);
    t = t * x + (1.0f / 6.0f);
    t = t * x + 0.5f;
    const float small = (t * x) * x + x;
    const float large = exp(x) - 1.0f;
    return (x > -0.35f && x < 0.35f) ? small : large;
  }

  static TENSORTOOLS_ALWAYS_INLINE float tanh(float x) {
    const float a = x < 0.0f ? -x : x;
    // |x| < 0.625: odd polynomial (Cephes tanhf); else 1 - 2 / (exp(2|x|) + 1).
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    const float ac = a > 9.0f ? 9.0f : a;
    const float big = 1.0f - 2.0f / (exp(2.0f * ac) + 1.0f);
    const float large = x < 0.0f ? -big : big;
    return a < 0.625f ? small : (x != x ? x : large);
  }
};

}  // namespace tensortools::cpu
