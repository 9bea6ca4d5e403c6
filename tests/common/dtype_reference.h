// Element types of the GQA tests beyond float32, written from ONNX Runtime's rotary, data type and
// quantized KV cache rules and from docs/gqa-semantics.md ("Beyond the reference"), independently
// of attnrt:
//   - float16 and bfloat16: round-to-nearest-even from float, by exact power-of-two scaling;
//   - float8 e4m3fn: a brute-force nearest-value encoder over the 256 codes (ties to an even
//     mantissa, saturation to ±448, NaN stays NaN);
//   - float8 e5m2 (OCP E5M2, the top byte of a float16): the same brute-force encoder (ties to an
//     even mantissa, saturation to ±57344, infinities included, NaN stays NaN);
//   - the KV-cache quantizer: q = clamp(rint(x · inv), lo, hi) with inv = 1/scale in float32
//     (scale 0 => inv = 1); int4 packs element 2i in the low nibble with a +8 bias;
//   - ggml's Q8_0 / Q4_0 blocks (PER_BLOCK_32): its reference quantizers and dequantizers;
//   - RoPE of one head row computed in float (the arithmetic the kernels' contract names).
//
// Like gqa_reference.h it knows nothing of attnrt: no attnrt header is included.
#pragma once

#include <cstdint>

namespace attnrt_test {

// ---- float16 / bfloat16 -------------------------------------------------------------------------
enum class FloatFormat { kFloat32, kFloat16, kBFloat16 };

const char* FloatFormatName(FloatFormat format);

// x rounded to the format with round-to-nearest-even; overflow gives ±inf, NaN stays NaN. The
// result is exact in float (every float16 and bfloat16 value is a float).
float RoundToFormat(FloatFormat format, float x);

// Bit patterns (IEEE binary16; bfloat16 = the upper half of a binary32).
uint16_t Float16Bits(float x);  // RoundToFormat(kFloat16, x) encoded
float Float16Value(uint16_t bits);
uint16_t BFloat16Bits(float x);  // RoundToFormat(kBFloat16, x) encoded
float BFloat16Value(uint16_t bits);

// One unit in the last place of the format at |x| (its exponent, floored at the smallest normal
// exponent, so subnormals and zero get the subnormal spacing). kFloat32 uses 2^-23 relative.
double UnitInLastPlace(FloatFormat format, double x);

// ---- float8 e4m3fn
// -------------------------------------------------------------------------------- 1 sign, 4
// exponent (bias 7), 3 mantissa bits; no infinities; 0x7F and 0xFF are NaN; max 448.
double E4M3FnValue(uint8_t code);
// Nearest code to x (sign kept, so -tiny -> -0 = 0x80); ties go to the code with an even mantissa;
// |x| > 448 (and ±inf) saturate to ±448; NaN gives 0x7F (0xFF for a negative NaN).
uint8_t E4M3FnEncode(float x);

// ---- float8 e5m2 --------------------------------------------------------------------------------
// 1 sign, 5 exponent (bias 15), 2 mantissa bits (OCP E5M2: the top byte of an IEEE binary16);
// exponent 0: subnormals (m/4) * 2^-14; exponent 31: ±infinity (mantissa 0), NaN (mantissa != 0);
// max finite 57344.
double E5M2Value(uint8_t code);
// Nearest finite code to x (sign kept, so -tiny -> -0 = 0x80); ties go to the code with an even
// mantissa; |x| > 57344 (and ±inf) saturate to ±57344 (0x7B / 0xFB); NaN gives 0x7F (0xFF for a
// negative NaN).
uint8_t E5M2Encode(float x);

// ---- KV-cache quantizer (ONNX Runtime's; docs/gqa-semantics.md for e4m3fn)
// --------------------
enum class CacheFormat { kInt8, kInt4, kFloat8E4M3Fn, kFloat8E5M2 };

const char* CacheFormatName(CacheFormat format);

// 1/scale in float32; 1 when scale is 0.
float InverseScale(float scale);
// The stored code of one element x with the given scale:
//   int8: the int8 value as a byte (two's complement), q = clamp(rint(x·inv), -128, 127);
//   int4: the biased nibble q + 8 (0..15), q = clamp(rint(x·inv), -8, 7);
//   e4m3fn: E4M3FnEncode(x·inv);
//   e5m2: E5M2Encode(x·inv).
// x·inv is a float32 product; rint rounds half to even.
uint8_t QuantizeElement(CacheFormat format, float x, float scale);
// The dequantized value of a code: q·scale (e4m3fn, e5m2: value·scale), in double.
double DequantizeElement(CacheFormat format, uint8_t code, float scale);
// int4 packing: element 2i (`even`) in the low nibble, element 2i+1 in the high nibble.
inline uint8_t PackInt4(uint8_t even_nibble, uint8_t odd_nibble) {
  return static_cast<uint8_t>((even_nibble & 0xF) | ((odd_nibble & 0xF) << 4));
}

// ---- block-quantized KV cache (ggml's Q8_0 and Q4_0) --------------------------------------------
// Written from ggml's block formats and its reference quantizers (ggml/src/ggml-quants.c,
// quantize_row_q8_0_ref / quantize_row_q4_0_ref, dequantize_row_q8_0 / dequantize_row_q4_0): each
// run of 32 elements of a row is one block that starts with its float16 scale d (little-endian),
//   Q8_0, 34 bytes: d, int8 q[32];  element j = q[j] · d
//   Q4_0, 18 bytes: d, uint8 b[16]; element j = ((b[j] & 0xF) - 8) · d,
//                                   element j + 16 = ((b[j] >> 4) - 8) · d
// (the products in float32). Quantizing a block of floats x:
//   Q8_0: d = max|x| / 127, id = d ? 1/d : 0, q[j] = roundf(x[j] · id) (half away from zero);
//   Q4_0: m = the x[j] of largest |x[j]| (the first on a tie), d = m / -8, id = d ? 1/d : 0,
//         code = min(15, (int)(x[j] · id + 8.5f));
// every operation in float32 (id from the float32 d), the stored d rounded to float16 to nearest
// even.
enum class BlockFormat { kQ8_0, kQ4_0 };

inline constexpr int64_t kBlockElements = 32;

const char* BlockFormatName(BlockFormat format);
// Bytes of one block of 32 elements: 34 (Q8_0) or 18 (Q4_0).
int64_t BlockBytes(BlockFormat format);
// Bytes of a row of n elements (n a multiple of 32).
inline int64_t BlockRowBytes(BlockFormat format, int64_t n) {
  return n / kBlockElements * BlockBytes(format);
}
// Quantizes a row of n floats (n a multiple of 32) into BlockRowBytes(format, n) bytes at out.
void QuantizeBlockRow(BlockFormat format, const float* x, int64_t n, uint8_t* out);
// The n element values of a quantized row: each the float32 product of its code and its block's d.
void DequantizeBlockRow(BlockFormat format, const uint8_t* in, int64_t n, float* out);

// ---- RoPE in float ------------------------------------------------------------------------------
// Rotates one head row in place at the cos/sin row given (half = R/2 entries each); dimensions
// [R, H) are left as they are. The arithmetic is ONNX Runtime's float32 RoPE on x86-64 (MLAS's
// AVX2 kernel, for float32 and float16 queries alike): y0 = fma(x0, c, -(x1*s)),
// y1 = fma(x0, s, x1*c), each product outside the fma rounded to float32 (this file is compiled
// with -ffp-contract=off, so no other operation is fused). Quantize-on-write of a rotated key is
// byte-exact only with that arithmetic: separate roundings move about a quarter of the rotated
// values by one float32 ulp, and the few that sit at a code boundary change code.
void RotateRowFloat(float* row, const float* cos_row, const float* sin_row, int64_t half,
                    bool interleaved);

}  // namespace attnrt_test
