// Encoders of the sparse MLA KV token formats (CANN's MixedQuantSparseFlashMla README): quant_mode
// 1 (608 bytes, bf16 group scales), quant_mode 2 (block-planar 576 + 8 bytes, e8m0 scales,
// FlashMLA's quantizer) and TQ4 (258 bytes, 4-bit codebook indices + fp16 scale, vllm-ascend's
// quantizer).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "attnrt/ops/sparse_mla.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core {
namespace {

constexpr int kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int kNope = ATTNRT_SPARSE_MLA_NOPE_DIM;
constexpr int kGroup = 64;
constexpr int kGroups = kNope / kGroup;

constexpr float kCodebook[16] = {-0.12091285f, -0.09111122f, -0.07112455f, -0.05513602f,
                                 -0.04132067f, -0.02874970f, -0.01700489f, -0.00568677f,
                                 0.00547294f,  0.01680406f,  0.02857605f,  0.04108622f,
                                 0.05492980f,  0.07101817f,  0.09115373f,  0.12037795f};

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t x = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE binary16, round to nearest even, overflow to infinity.
uint16_t FloatToFp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7C00;
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24 (a * 2^24 is exact)
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e = 0;
  std::frexp(a, &e);                                                // a = m * 2^e, m in [0.5, 1)
  int m = static_cast<int>(std::nearbyint(std::ldexp(a, 11 - e)));  // [1024, 2048]
  int exponent = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++exponent;
  }
  if (exponent >= 31) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(exponent << 10) | static_cast<uint16_t>(m - 1024);
}

float Fp8E4M3ToFloat(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                         : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (c & 0x80) ? -v : v;
}

// float8_e4m3fn, round to nearest even, saturated to +-448 (its largest finite value).
uint8_t FloatToFp8E4M3(float x) {
  static const auto kValues = [] {
    std::array<float, 127> v{};
    for (int c = 0; c < 127; ++c) v[c] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 126;
  const auto it = std::upper_bound(kValues.begin(), kValues.end(), a);
  const int hi = static_cast<int>(it - kValues.begin());  // kValues[hi - 1] <= a < kValues[hi]
  const int lo = hi - 1;
  const float dlo = a - kValues[lo], dhi = kValues[hi] - a;
  int c = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
  return sign | static_cast<uint8_t>(c);
}

Status ReadRow(const void* kv, attnrt_dtype dtype, size_t token, float* row) {
  if (DtypeEquals(dtype, kFloat32)) {
    std::memcpy(row, static_cast<const unsigned char*>(kv) + token * kD * sizeof(float),
                kD * sizeof(float));
  } else if (DtypeEquals(dtype, kBFloat16)) {
    // memcpy: the caller's buffer need not be 2-byte aligned.
    const auto* src = static_cast<const unsigned char*>(kv) + token * kD * sizeof(uint16_t);
    for (int d = 0; d < kD; ++d) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * d, sizeof(bits));
      row[d] = Bf16ToFloat(bits);
    }
  } else {
    return InvalidArgument(
        StrCat("kv_dtype: expected float32 or bfloat16, got ", DtypeString(dtype)));
  }
  for (int d = 0; d < kD; ++d) {
    if (!std::isfinite(row[d])) {
      return InvalidArgument(
          StrCat("kv: token ", token, " dimension ", d, " is not a finite number (", row[d], ")"));
    }
  }
  return Status::Ok();
}

void StoreU16(uint8_t* dst, uint16_t v) { std::memcpy(dst, &v, 2); }

float GroupAmax(const float* row, int g) {
  float amax = 0.0f;
  for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) amax = std::max(amax, std::fabs(row[d]));
  return amax;
}

// The largest finite magnitudes of the stored formats and the smallest that round past them.
constexpr float kBf16Max = 3.38953139e38f;  // 0x7F7F
constexpr float kFp16Max = 65504.0f;        // 0x7BFF; 65520 and above round to infinity
bool Bf16Overflows(float x) { return (FloatToBf16(x) & 0x7FFFu) >= 0x7F80u; }

// Rope dims are stored as bf16: a finite value must not round to infinity.
Status CheckRopeFits(const float* row, size_t token) {
  for (int d = kNope; d < kD; ++d) {
    if (Bf16Overflows(row[d])) {
      return InvalidArgument(StrCat("kv: token ", token, " dimension ", d, " value ", row[d],
                                    " overflows the bf16 rope format (largest finite magnitude ",
                                    kBf16Max, ")"));
    }
  }
  return Status::Ok();
}

float Tq4Scale(const float* row, uint8_t* codes);

// Checks that every value of one token encodes to a finite value of the format.
Status CheckMode1Token(const float* row, size_t token) { return CheckRopeFits(row, token); }

Status CheckMode2Token(const float* row, size_t token) {
  // Scales are 2^e with e in [-13, 120] for finite inputs (amax / 448 <= 7.6e35): always within
  // e8m0's [2^-127, 2^127]; codes are saturated to +-448 as documented.
  return CheckRopeFits(row, token);
}

Status CheckTq4Token(const float* row, size_t token) {
  uint8_t codes[kD];
  const float scale = Tq4Scale(row, codes);
  if (!(scale < 65520.0f)) {
    int dmax = 0;
    for (int d = 1; d < kD; ++d) {
      if (std::fabs(row[d]) > std::fabs(row[dmax])) dmax = d;
    }
    return InvalidArgument(StrCat("kv: token ", token, " (largest value ", row[dmax],
                                  " at dimension ", dmax, ") has a TQ4 scale of ", scale,
                                  " that overflows the fp16 scale format (largest finite ",
                                  kFp16Max, ")"));
  }
  return Status::Ok();
}

void EncodeMode1(const float* row, uint8_t* token) {
  std::memset(token, 0, ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES);
  for (int d = 0; d < ATTNRT_SPARSE_MLA_ROPE_DIM; ++d) {
    StoreU16(token + 2 * d, FloatToBf16(row[kNope + d]));
  }
  for (int g = 0; g < kGroups; ++g) {
    const float amax = GroupAmax(row, g);
    const uint16_t scale_bits = amax > 0.0f ? FloatToBf16(amax / 448.0f) : FloatToBf16(1.0f);
    const float scale = Bf16ToFloat(scale_bits);
    StoreU16(token + 576 + 2 * g, scale_bits);
    for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
      token[128 + d] = FloatToFp8E4M3(row[d] / scale);
  }
}

void EncodeMode2(const float* row, uint8_t* feature, uint8_t* scales) {
  for (int g = 0; g < kGroups; ++g) {
    const float v = std::max(GroupAmax(row, g) / 448.0f, 1e-4f);
    int e = 0;
    const float m = std::frexp(v, &e);           // v = m * 2^e, m in [0.5, 1)
    const int exponent = m == 0.5f ? e - 1 : e;  // ceil(log2(v))
    scales[g] = static_cast<uint8_t>(exponent + 127);
    const float scale = std::ldexp(1.0f, exponent);
    for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) feature[d] = FloatToFp8E4M3(row[d] / scale);
  }
  scales[kGroups] = 0;
  for (int d = 0; d < ATTNRT_SPARSE_MLA_ROPE_DIM; ++d) {
    StoreU16(feature + kNope + 2 * d, FloatToBf16(row[kNope + d]));
  }
}

// Fills the 512 codebook indices of one row and returns its scale (before fp16 rounding).
float Tq4Scale(const float* row, uint8_t* codes) {
  double sum_sq = 0.0;
  for (int d = 0; d < kD; ++d) sum_sq += double{row[d]} * row[d];
  const double inv = 1.0 / std::sqrt(sum_sq + 1e-16);
  float midpoints[15];
  for (int k = 0; k < 15; ++k) midpoints[k] = 0.5f * (kCodebook[k] + kCodebook[k + 1]);
  double code_sq = 0.0;
  for (int d = 0; d < kD; ++d) {
    const float unit = static_cast<float>(row[d] * inv);
    const int n = static_cast<int>(std::upper_bound(midpoints, midpoints + 15, unit) - midpoints);
    codes[d] = static_cast<uint8_t>(n);
    code_sq += double{kCodebook[n]} * kCodebook[n];
  }
  const double scale = sum_sq > 0.0 ? std::sqrt(sum_sq) / std::sqrt(code_sq) : 0.0;
  return scale >= 3.0e38 ? std::numeric_limits<float>::infinity() : static_cast<float>(scale);
}

void EncodeTq4(const float* row, uint8_t* token) {
  uint8_t codes[kD];
  const float scale = Tq4Scale(row, codes);
  for (int t = 0; t < kD / 2; ++t) {
    token[t] = static_cast<uint8_t>(codes[2 * t] | (codes[2 * t + 1] << 4));
  }
  StoreU16(token + 256, FloatToFp16(scale));
}

size_t RowBytes(attnrt_dtype dtype) {
  return DtypeEquals(dtype, kFloat32) ? sizeof(float) * kD : sizeof(uint16_t) * kD;
}

// The tokens are written while later rows are still to be read: an output that shares a byte with
// the input would change rows before they are encoded (or encode rows half overwritten), so any
// overlap is refused, as the ops refuse an output over an input.
Status CheckDisjoint(const void* kv, size_t kv_bytes, const void* out, size_t out_bytes,
                     const char* out_name) {
  const ByteRange in{reinterpret_cast<uintptr_t>(kv), reinterpret_cast<uintptr_t>(kv) + kv_bytes};
  const ByteRange written{reinterpret_cast<uintptr_t>(out),
                          reinterpret_cast<uintptr_t>(out) + out_bytes};
  if (in.end < in.begin || written.end < written.begin) {
    return InvalidArgument(StrCat(out_name, ": the input or output bytes wrap the address space"));
  }
  if (!Overlaps(in, written)) return Status::Ok();
  return InvalidArgument(StrCat(out_name, ": overlaps kv in memory (kv ", kv_bytes, " bytes at ",
                                kv, ", ", out_name, " ", out_bytes, " bytes at ", out,
                                "), expected disjoint buffers"));
}

// Rejects a token count whose input or output byte size does not fit in size_t.
Status CheckTokenCount(size_t num_tokens, attnrt_dtype dtype, size_t token_bytes) {
  const size_t in_bytes = RowBytes(dtype);
  const size_t limit = SIZE_MAX / std::max(in_bytes, token_bytes);
  if (num_tokens > limit) {
    return InvalidArgument(StrCat("num_tokens: expected at most ", limit,
                                  " (the input and output byte sizes must fit in size_t), got ",
                                  num_tokens));
  }
  return Status::Ok();
}

Status CheckDtype(attnrt_dtype dtype) {
  if (DtypeEquals(dtype, kFloat32) || DtypeEquals(dtype, kBFloat16)) return Status::Ok();
  return InvalidArgument(
      StrCat("kv_dtype: expected float32 or bfloat16, got ", DtypeString(dtype)));
}

// Validates every token of the call (finite values that the format can hold) before the first
// output byte is written, then encodes them.
Status Encode(const void* kv, attnrt_dtype dtype, size_t num_tokens, const void* out,
              Status (*check_one)(const float*, size_t), void (*encode_one)(const float*, uint8_t*),
              size_t token_bytes) {
  if (kv == nullptr && num_tokens > 0) return InvalidArgument("kv: expected a non-NULL pointer");
  if (out == nullptr && num_tokens > 0) return InvalidArgument("out: expected a non-NULL pointer");
  ATTNRT_RETURN_IF_ERROR(CheckDtype(dtype));
  ATTNRT_RETURN_IF_ERROR(CheckTokenCount(num_tokens, dtype, token_bytes));
  ATTNRT_RETURN_IF_ERROR(
      CheckDisjoint(kv, num_tokens * RowBytes(dtype), out, num_tokens * token_bytes, "out"));
  float row[kD];
  for (size_t t = 0; t < num_tokens; ++t) {
    ATTNRT_RETURN_IF_ERROR(ReadRow(kv, dtype, t, row));
    ATTNRT_RETURN_IF_ERROR(check_one(row, t));
  }
  for (size_t t = 0; t < num_tokens; ++t) {
    ATTNRT_RETURN_IF_ERROR(ReadRow(kv, dtype, t, row));
    encode_one(row, static_cast<uint8_t*>(const_cast<void*>(out)) + t * token_bytes);
  }
  return Status::Ok();
}

}  // namespace
}  // namespace attnrt::core

extern "C" {

ATTNRT_API attnrt_status attnrt_sparse_mla_encode_mode1(const void* kv, attnrt_dtype kv_dtype,
                                                        size_t num_tokens, uint8_t* out) {
  using namespace attnrt::core;
  return RecordLastError(Encode(kv, kv_dtype, num_tokens, out, &CheckMode1Token, &EncodeMode1,
                                ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES));
}

ATTNRT_API attnrt_status attnrt_sparse_mla_encode_mode2(const void* kv, attnrt_dtype kv_dtype,
                                                        uint8_t* block, int64_t block_size,
                                                        int64_t slot) {
  using namespace attnrt::core;
  auto body = [&]() -> Status {
    if (kv == nullptr) return InvalidArgument("kv: expected a non-NULL pointer");
    if (block == nullptr) return InvalidArgument("block: expected a non-NULL pointer");
    if (block_size < 1 || block_size > 1024) {
      return InvalidArgument(StrCat("block_size: expected 1 to 1024, got ", block_size));
    }
    if (slot < 0 || slot >= block_size) {
      return InvalidArgument(StrCat("slot: expected 0 to ", block_size - 1, ", got ", slot));
    }
    ATTNRT_RETURN_IF_ERROR(CheckDtype(kv_dtype));
    ATTNRT_RETURN_IF_ERROR(CheckDisjoint(
        kv, RowBytes(kv_dtype), block,
        static_cast<size_t>(block_size) * ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES, "block"));
    float row[kD];
    ATTNRT_RETURN_IF_ERROR(ReadRow(kv, kv_dtype, 0, row));
    ATTNRT_RETURN_IF_ERROR(CheckMode2Token(row, 0));
    EncodeMode2(row, block + slot * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES,
                block + block_size * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES +
                    slot * ATTNRT_SPARSE_MLA_MODE2_SCALE_BYTES);
    return Status::Ok();
  };
  return RecordLastError(body());
}

ATTNRT_API attnrt_status attnrt_sparse_mla_encode_tq4(const void* kv, attnrt_dtype kv_dtype,
                                                      size_t num_tokens, uint8_t* out) {
  using namespace attnrt::core;
  return RecordLastError(Encode(kv, kv_dtype, num_tokens, out, &CheckTq4Token, &EncodeTq4,
                                ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES));
}

ATTNRT_API const float* attnrt_sparse_mla_tq4_codebook(void) { return attnrt::core::kCodebook; }

}  // extern "C"
