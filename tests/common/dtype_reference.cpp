// Element types and the KV-cache quantizer of the GQA tests; see dtype_reference.h.
#include "common/dtype_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace attnrt_test {
namespace {

struct FormatInfo {
  int mantissa_bits;
  int min_exponent;  // exponent of the smallest normal value
  double max_finite;
};

FormatInfo Info(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFloat16:
      return {10, -14, 65504.0};
    case FloatFormat::kBFloat16:
      return {7, -126, std::ldexp(255.0, 120)};  // (2 - 2^-7) * 2^127
    case FloatFormat::kFloat32:
      break;
  }
  return {23, -126, static_cast<double>(std::numeric_limits<float>::max())};
}

}  // namespace

const char* FloatFormatName(FloatFormat format) {
  switch (format) {
    case FloatFormat::kFloat16:
      return "float16";
    case FloatFormat::kBFloat16:
      return "bfloat16";
    case FloatFormat::kFloat32:
      break;
  }
  return "float32";
}

float RoundToFormat(FloatFormat format, float x) {
  if (format == FloatFormat::kFloat32 || !std::isfinite(x) || x == 0.0f) return x;
  const FormatInfo f = Info(format);
  const double ax = std::fabs(static_cast<double>(x));
  const int e = std::max(std::ilogb(ax), f.min_exponent);
  // The format's spacing at |x|: a power of two, so ax / ulp is exact and nearbyint (the default
  // rounding mode, to nearest with ties to even) is the format's rounding.
  const double ulp = std::ldexp(1.0, e - f.mantissa_bits);
  double r = std::nearbyint(ax / ulp) * ulp;
  if (r > f.max_finite) r = std::numeric_limits<double>::infinity();
  return static_cast<float>(std::copysign(r, static_cast<double>(x)));
}

uint16_t Float16Bits(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00);
  const double r = std::fabs(static_cast<double>(RoundToFormat(FloatFormat::kFloat16, x)));
  if (std::isinf(r)) return static_cast<uint16_t>(sign | 0x7C00);
  if (r < std::ldexp(1.0, -14)) {  // subnormal (or zero): multiples of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, 24)));
  }
  const int e = std::ilogb(r);
  const auto mantissa = static_cast<uint16_t>(std::ldexp(std::ldexp(r, -e) - 1.0, 10));
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mantissa);
}

float Float16Value(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  double v = 0.0;
  if (exponent == 31) {
    v = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                      : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), -24);
  } else {
    v = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  }
  return static_cast<float>((bits & 0x8000) ? -v : v);
}

uint16_t BFloat16Bits(float x) {
  if (std::isnan(x)) return static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7FC0);
  // The rounded value is a float whose low 16 bits are zero.
  const float r = RoundToFormat(FloatFormat::kBFloat16, x);
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(r) >> 16);
}

float BFloat16Value(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

double UnitInLastPlace(FloatFormat format, double x) {
  const FormatInfo f = Info(format);
  const double ax = std::fabs(x);
  if (!std::isfinite(ax)) return std::numeric_limits<double>::infinity();
  const int e = ax == 0.0 ? f.min_exponent : std::max(std::ilogb(ax), f.min_exponent);
  return std::ldexp(1.0, e - f.mantissa_bits);
}

double E4M3FnValue(uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  double v = 0.0;
  if (exponent == 15 && mantissa == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), -9);  // (m/8) * 2^-6
  } else {
    v = std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  }
  return (code & 0x80) ? -v : v;
}

uint8_t E4M3FnEncode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  const double ax = std::fabs(static_cast<double>(x));
  if (ax > 448.0) return static_cast<uint8_t>(sign | 0x7E);  // saturate (±inf included)
  // Brute force over the non-negative finite codes 0x00..0x7E, in increasing value order: the
  // nearest wins; on a tie the even code (even mantissa) wins.
  uint8_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(E4M3FnValue(static_cast<uint8_t>(c)) - ax);
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_distance = d;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

double E5M2Value(uint8_t code) {
  const int exponent = (code >> 2) & 0x1F;
  const int mantissa = code & 0x3;
  double v = 0.0;
  if (exponent == 31) {
    v = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                      : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), -16);  // (m/4) * 2^-14
  } else {
    v = std::ldexp(1.0 + mantissa / 4.0, exponent - 15);
  }
  return (code & 0x80) ? -v : v;
}

uint8_t E5M2Encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  const double ax = std::fabs(static_cast<double>(x));
  if (ax > 57344.0) return static_cast<uint8_t>(sign | 0x7B);  // saturate (±inf included)
  // Brute force over the non-negative finite codes 0x00..0x7B, in increasing value order: the
  // nearest wins; on a tie the even code (even mantissa) wins.
  uint8_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7B; ++c) {
    const double d = std::fabs(E5M2Value(static_cast<uint8_t>(c)) - ax);
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_distance = d;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

const char* CacheFormatName(CacheFormat format) {
  switch (format) {
    case CacheFormat::kInt8:
      return "int8";
    case CacheFormat::kInt4:
      return "int4";
    case CacheFormat::kFloat8E5M2:
      return "float8_e5m2";
    case CacheFormat::kFloat8E4M3Fn:
      break;
  }
  return "float8_e4m3fn";
}

float InverseScale(float scale) { return scale == 0.0f ? 1.0f : 1.0f / scale; }

uint8_t QuantizeElement(CacheFormat format, float x, float scale) {
  const float y = x * InverseScale(scale);  // one float32 product
  switch (format) {
    case CacheFormat::kInt8: {
      const float q = std::clamp(std::nearbyint(y), -128.0f, 127.0f);
      return static_cast<uint8_t>(static_cast<int8_t>(q));
    }
    case CacheFormat::kInt4: {
      const float q = std::clamp(std::nearbyint(y), -8.0f, 7.0f);
      return static_cast<uint8_t>(static_cast<int>(q) + 8);
    }
    case CacheFormat::kFloat8E5M2:
      return E5M2Encode(y);
    case CacheFormat::kFloat8E4M3Fn:
      break;
  }
  return E4M3FnEncode(y);
}

double DequantizeElement(CacheFormat format, uint8_t code, float scale) {
  switch (format) {
    case CacheFormat::kInt8:
      return static_cast<double>(static_cast<int8_t>(code)) * scale;
    case CacheFormat::kInt4:
      return static_cast<double>(static_cast<int>(code & 0xF) - 8) * scale;
    case CacheFormat::kFloat8E5M2:
      return E5M2Value(code) * scale;
    case CacheFormat::kFloat8E4M3Fn:
      break;
  }
  return E4M3FnValue(code) * scale;
}

const char* BlockFormatName(BlockFormat format) {
  return format == BlockFormat::kQ8_0 ? "q8_0" : "q4_0";
}

int64_t BlockBytes(BlockFormat format) { return format == BlockFormat::kQ8_0 ? 34 : 18; }

void QuantizeBlockRow(BlockFormat format, const float* x, int64_t n, uint8_t* out) {
  for (int64_t block = 0; block < n / kBlockElements; ++block) {
    const float* xb = x + block * kBlockElements;
    uint8_t* ob = out + block * BlockBytes(format);
    float d = 0.0f;
    if (format == BlockFormat::kQ8_0) {
      float amax = 0.0f;
      for (int64_t j = 0; j < kBlockElements; ++j) amax = std::max(amax, std::fabs(xb[j]));
      d = amax / 127.0f;
    } else {
      float amax = 0.0f, max = 0.0f;  // the signed element of largest magnitude, the first on a tie
      for (int64_t j = 0; j < kBlockElements; ++j) {
        if (amax < std::fabs(xb[j])) {
          amax = std::fabs(xb[j]);
          max = xb[j];
        }
      }
      d = max / -8.0f;
    }
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d_bits = Float16Bits(d);
    ob[0] = static_cast<uint8_t>(d_bits & 0xFF);  // little-endian
    ob[1] = static_cast<uint8_t>(d_bits >> 8);
    if (format == BlockFormat::kQ8_0) {
      for (int64_t j = 0; j < kBlockElements; ++j) {
        const float q = std::clamp(std::round(xb[j] * id), -127.0f, 127.0f);  // half away from 0
        ob[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
    } else {
      auto code = [&](float v) {
        const float y = v * id + 8.5f;  // a float32 product, then a float32 sum
        if (!(y >= 0.0f)) return 0;
        return std::min(15, static_cast<int>(std::min(y, 16.0f)));  // truncation toward zero
      };
      for (int64_t j = 0; j < kBlockElements / 2; ++j) {
        ob[2 + j] = static_cast<uint8_t>(code(xb[j]) | code(xb[j + kBlockElements / 2]) << 4);
      }
    }
  }
}

void DequantizeBlockRow(BlockFormat format, const uint8_t* in, int64_t n, float* out) {
  for (int64_t block = 0; block < n / kBlockElements; ++block) {
    const uint8_t* ib = in + block * BlockBytes(format);
    float* ob = out + block * kBlockElements;
    const float d = Float16Value(static_cast<uint16_t>(ib[0] | ib[1] << 8));
    if (format == BlockFormat::kQ8_0) {
      for (int64_t j = 0; j < kBlockElements; ++j) {
        ob[j] = static_cast<float>(static_cast<int8_t>(ib[2 + j])) * d;
      }
    } else {
      for (int64_t j = 0; j < kBlockElements / 2; ++j) {
        ob[j] = static_cast<float>((ib[2 + j] & 0xF) - 8) * d;
        ob[j + kBlockElements / 2] = static_cast<float>((ib[2 + j] >> 4) - 8) * d;
      }
    }
  }
}

void RotateRowFloat(float* row, const float* cos_row, const float* sin_row, int64_t half,
                    bool interleaved) {
  const std::vector<float> src(row, row + 2 * half);
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_row[i];
    const float s = sin_row[i];
    const int64_t i0 = interleaved ? 2 * i : i;
    const int64_t i1 = interleaved ? 2 * i + 1 : i + half;
    // ONNX Runtime's float32 RoPE on x86-64 (MLAS, AVX2): each output is one fused multiply-add
    // over the other product rounded to float32. fmaf is the C library's, correctly rounded.
    row[i0] = std::fmaf(src[i0], c, -(src[i1] * s));
    row[i1] = std::fmaf(src[i0], s, src[i1] * c);
  }
}

}  // namespace attnrt_test
