// Scalar formats and one-token decoders of the float64 sparse MLA reference (see
// sparse_mla_reference.h for its sources): bf16 / fp16 / fp8 e4m3fn / e8m0 conversions and the
// quant_mode 1 / 2 / 3 token formats.
#include <cmath>
#include <cstring>
#include <limits>

#include "sparse_mla_reference.h"

namespace attnrt::testref {

// The TQ4 codebook (vllm-ascend's TurboQuant), ascending, index = nibble value.
const float kTq4Codebook[16] = {
    -0.12091285f, -0.09111122f, -0.07112455f, -0.05513602f, -0.04132067f, -0.02874970f,
    -0.01700489f, -0.00568677f, 0.00547294f,  0.01680406f,  0.02857605f,  0.04108622f,
    0.05492980f,  0.07101817f,  0.09115373f,  0.12037795f,
};

// Its RNE-bf16 images, as the NPU's fast path lists them (the self-test checks they are
// FloatToBf16(kTq4Codebook[n])).
const uint16_t kTq4CodebookBf16Bits[16] = {
    0xBDF8, 0xBDBB, 0xBD92, 0xBD62, 0xBD29, 0xBCEC, 0xBC8B, 0xBBBA,
    0x3BB3, 0x3C8A, 0x3CEA, 0x3D28, 0x3D61, 0x3D91, 0x3DBB, 0x3DF7,
};

namespace {

constexpr int D = kSparseMlaHeadDim;
constexpr int DN = kSparseMlaNopeDim;
constexpr int DR = kSparseMlaRopeDim;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t BitsFromFloat(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// x rounded once (nearest, ties to even) to a binary format with `mant_bits` explicit mantissa
// bits, minimum normal exponent `emin` (gradual underflow below it) and largest finite value
// `max_finite`; values that round above max_finite become infinities.
double RoundToBinary(double x, int mant_bits, int emin, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin;
  const int quantum = e - mant_bits;
  const double r = std::nearbyint(std::ldexp(x, -quantum));  // default mode: ties to even
  const double y = std::ldexp(r, quantum);
  if (std::fabs(y) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return y;
}

const double kBf16Max = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127
const double kFp16Max = 65504.0;

double RoundToKind(SparseMlaFloat16Kind kind, double x) {
  return kind == SparseMlaFloat16Kind::kBf16 ? RoundToBf16(x) : RoundToFp16(x);
}

float ValueOfKind(SparseMlaFloat16Kind kind, uint16_t bits) {
  return kind == SparseMlaFloat16Kind::kBf16 ? Bf16ToFloat(bits) : Fp16ToFloat(bits);
}

}  // namespace

// ---- scalar conversions -------------------------------------------------------------------------
float Bf16ToFloat(uint16_t bits) { return FloatFromBits(static_cast<uint32_t>(bits) << 16); }

double RoundToBf16(double x) { return RoundToBinary(x, 7, -126, kBf16Max); }

double RoundToFp16(double x) { return RoundToBinary(x, 10, -14, kFp16Max); }

uint16_t DoubleToBf16(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFFC0 : 0x7FC0;
  // The rounded value is exact in float, and a bf16 value is the upper half of its float bits.
  const float f = static_cast<float>(RoundToBf16(x));
  return static_cast<uint16_t>(BitsFromFloat(f) >> 16);
}

uint16_t FloatToBf16(float x) { return DoubleToBf16(static_cast<double>(x)); }

float Fp16ToFloat(uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  double v;
  if (exponent == 0x1F) {
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), -24);
  } else {
    v = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  }
  return static_cast<float>(sign ? -v : v);
}

uint16_t DoubleToFp16(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFE00 : 0x7E00;
  const double v = RoundToFp16(x);
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a < std::ldexp(1.0, -14)) {  // subnormal or zero: a = m * 2^-24
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  }
  const int e = std::ilogb(a);  // 2^e <= a < 2^(e+1), -14 <= e <= 15
  const int mantissa = static_cast<int>(std::ldexp(a, 10 - e)) - 1024;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | mantissa);
}

uint16_t FloatToFp16(float x) { return DoubleToFp16(static_cast<double>(x)); }

float Fp8E4M3FnToFloat(uint8_t code) {
  const int sign = code >> 7;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 7;
  float v;
  if (exponent == 0xF && mantissa == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -9);  // 2^-6 * m / 8
  } else {
    v = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // 2^(e-7) * (8+m) / 8
  }
  return sign ? -v : v;
}

float E8M0ToFloat(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

// ---- one-token decoders -------------------------------------------------------------------------
void DecodeQuantMode1Token(const uint8_t* token, float* out) {
  float scale[kSparseMlaScaleGroups];
  for (int g = 0; g < kSparseMlaScaleGroups; ++g) {
    scale[g] = Bf16ToFloat(Load16(token + kQuantMode1ScaleOffset + 2 * g));
  }
  for (int d = 0; d < DN; ++d) {
    // fp32 product (exact: 4 x 8 significant bits), then RNE to bf16.
    const float product =
        Fp8E4M3FnToFloat(token[kQuantMode1NopeOffset + d]) * scale[d / kSparseMlaScaleGroup];
    out[d] = Bf16ToFloat(FloatToBf16(product));
  }
  for (int d = 0; d < DR; ++d) {
    out[DN + d] = Bf16ToFloat(Load16(token + kQuantMode1RopeOffset + 2 * d));
  }
}

void DecodeQuantMode2Token(const uint8_t* feature, const uint8_t* scales, float* out) {
  float scale[kSparseMlaScaleGroups];
  for (int g = 0; g < kSparseMlaScaleGroups; ++g) {
    // e8m0 -> bf16 -> fp32 in the kernel; 2^(e-127) is exact in both. scales[7] is padding.
    scale[g] = E8M0ToFloat(scales[g]);
  }
  for (int d = 0; d < DN; ++d) {
    const float product =
        Fp8E4M3FnToFloat(feature[kQuantMode2NopeOffset + d]) * scale[d / kSparseMlaScaleGroup];
    out[d] = Bf16ToFloat(FloatToBf16(product));
  }
  for (int d = 0; d < DR; ++d) {
    out[DN + d] = Bf16ToFloat(Load16(feature + kQuantMode2RopeOffset + 2 * d));
  }
}

void DecodeQuantMode2BlockToken(const uint8_t* block_base, int64_t block_size, int64_t offset,
                                float* out) {
  DecodeQuantMode2Token(
      block_base + offset * kQuantMode2FeatureBytes,
      block_base + block_size * kQuantMode2FeatureBytes + offset * kQuantMode2ScaleBytes, out);
}

int Tq4Code(const uint8_t* slot, int d) {
  return (d % 2 == 0) ? (slot[d / 2] & 0xF) : (slot[d / 2] >> 4);
}

void DecodeTq4Token(const uint8_t* slot, float* out, Tq4Centroids centroids,
                    SparseMlaFloat16Kind kv_dtype) {
  const float scale = Fp16ToFloat(Load16(slot + kTq4ScaleOffset));
  auto centroid = [centroids](int n) {
    return centroids == Tq4Centroids::kFp32 ? kTq4Codebook[n]
                                            : Bf16ToFloat(kTq4CodebookBf16Bits[n]);
  };
  for (int t = 0; t < kTq4ScaleOffset; ++t) {
    const int lo = slot[t] & 0xF;
    const int hi = slot[t] >> 4;
    const float v_lo = centroid(lo) * scale;  // fp32 product, then RINT to the KV dtype
    const float v_hi = centroid(hi) * scale;
    out[2 * t] = static_cast<float>(RoundToKind(kv_dtype, v_lo));
    out[2 * t + 1] = static_cast<float>(RoundToKind(kv_dtype, v_hi));
  }
}

void DecodeFloat16Token(const uint8_t* token, float* out, SparseMlaFloat16Kind dtype) {
  for (int d = 0; d < D; ++d) out[d] = ValueOfKind(dtype, Load16(token + 2 * d));
}

}  // namespace attnrt::testref
