// Element types of the p_precision test (paged_gqa_p_precision_test.cpp): float32, bfloat16 and
// float16 values held as doubles, their spacing, rounding to nearest even and their bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attnrt/attnrt.h"

namespace attnrt_test::p_precision {

struct Type {
  attnrt_dtype dtype;
  int bits;     // significand bits, implicit one included (24, 8, 11)
  int min_exp;  // exponent of the smallest normal (-126, -126, -14)
  const char* name;
};
constexpr Type kTypeF32{ATTNRT_DTYPE_FLOAT32, 24, -126, "float32"};
constexpr Type kTypeBf16{ATTNRT_DTYPE_BFLOAT16, 8, -126, "bfloat16"};
constexpr Type kTypeF16{ATTNRT_DTYPE_FLOAT16, 11, -14, "float16"};

// Spacing of T around |x| (at least the subnormal step).
inline double Step(const Type& t, double x) {
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, t.min_exp) - (t.bits - 1));
}

// x rounded to T, to nearest even.
inline double RoundTo(const Type& t, double x) {
  if (x == 0.0) return 0.0;
  const double step = Step(t, x);
  return std::nearbyint(x / step) * step;
}

// True when x lies so close to a midpoint of T that a float32 computation of x (a few ulp off)
// may round either way.
inline bool NearMidpoint(const Type& t, double x) {
  if (x == 0.0) return false;
  const double y = x / Step(t, x);
  return std::fabs(y - std::floor(y) - 0.5) < 1.0 / 1024;
}

inline uint16_t Bits16(const Type& t, double x) {  // x exactly representable in T
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (t.bits == 8) return static_cast<uint16_t>(u >> 16);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const double a = std::fabs(x);
  if (a == 0) return sign;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  if (e - 1 < -14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(a * 0x1p24));
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) |
                               static_cast<uint16_t>((m * 2 - 1) * 1024));
}

inline double FromBits16(const Type& t, uint16_t b) {
  if (t.bits == 8) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = (b >> 10) & 0x1F;
  const int m = b & 0x3FF;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? NAN : std::ldexp(1024 + m, e - 25);
  return (b & 0x8000) ? -v : v;
}

inline void Store(const Type& t, double x, unsigned char* dst) {
  if (t.bits == 24) {
    const float f = static_cast<float>(x);
    std::memcpy(dst, &f, 4);
  } else {
    const uint16_t b = Bits16(t, x);
    std::memcpy(dst, &b, 2);
  }
}

inline double Load(const Type& t, const unsigned char* src) {
  if (t.bits == 24) {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  return FromBits16(t, b);
}

inline size_t Bytes(const Type& t) { return t.dtype.bits / 8; }

}  // namespace attnrt_test::p_precision
