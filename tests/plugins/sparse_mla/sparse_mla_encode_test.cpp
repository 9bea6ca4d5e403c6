// The public KV encoders (attnrt_sparse_mla_encode_*) against the reference's decoders: round
// trips within each format's quantization error, rope stored as bf16 exactly, the byte layout
// (pad bytes zero, nibble order), and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

namespace ref = attnrt::testref;
constexpr int kD = 512;

std::vector<float> Rows(std::mt19937_64& rng, int n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> amplitude(0.01f, 20.0f);
  std::vector<float> rows(static_cast<size_t>(n) * kD);
  for (int t = 0; t < n; ++t) {
    for (int g = 0; g < 8; ++g) {
      const float a = amplitude(rng);
      for (int d = g * 64; d < (g + 1) * 64; ++d) rows[t * kD + d] = a * normal(rng);
    }
  }
  return rows;
}

// fp8 e4m3 keeps 3 mantissa bits: |error| <= 2^-4 |x| for normals, plus the subnormal step
// 2^-9 * scale; the bf16 rounding of the product adds 2^-9 |x|.
void ExpectNopeClose(const float* x, const float* decoded, const std::vector<float>& scale) {
  for (int d = 0; d < 448; ++d) {
    const double bound =
        0.0625 * std::fabs(x[d]) + std::ldexp(scale[d / 64], -9) + std::ldexp(std::fabs(x[d]), -8);
    ASSERT_LE(std::fabs(decoded[d] - x[d]), bound) << "dimension " << d;
  }
}

TEST(SparseMlaEncode, Mode1RoundTrip) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const int n = 50;
  const std::vector<float> rows = Rows(rng, n);
  std::vector<uint8_t> tokens(n * 608, 0xAB);
  ASSERT_EQ(attnrt_sparse_mla_encode_mode1(rows.data(), kF32, n, tokens.data()), ATTNRT_OK);
  for (int t = 0; t < n; ++t) {
    const uint8_t* token = tokens.data() + t * 608;
    float decoded[kD];
    ref::DecodeQuantMode1Token(token, decoded);
    std::vector<float> scale(7);
    for (int g = 0; g < 7; ++g) {
      uint16_t bits;
      std::memcpy(&bits, token + 576 + 2 * g, 2);
      scale[g] = ref::Bf16ToFloat(bits);
    }
    ExpectNopeClose(rows.data() + t * kD, decoded, scale);
    for (int d = 448; d < kD; ++d) {
      ASSERT_EQ(decoded[d], ref::Bf16ToFloat(ref::FloatToBf16(rows[t * kD + d]))) << d;
    }
    for (int k = 590; k < 608; ++k) ASSERT_EQ(token[k], 0) << "pad byte " << k;
  }
  // bf16 input gives the same bytes as its float32 image.
  std::vector<uint16_t> bf16(rows.size());
  std::vector<float> widened(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    bf16[k] = ref::FloatToBf16(rows[k]);
    widened[k] = ref::Bf16ToFloat(bf16[k]);
  }
  std::vector<uint8_t> a(n * 608), b(n * 608);
  ASSERT_EQ(attnrt_sparse_mla_encode_mode1(bf16.data(), kBf16, n, a.data()), ATTNRT_OK);
  ASSERT_EQ(attnrt_sparse_mla_encode_mode1(widened.data(), kF32, n, b.data()), ATTNRT_OK);
  EXPECT_EQ(a, b);
}

TEST(SparseMlaEncode, Mode2RoundTripInBlockPlanarLayout) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const int bs = 5;
  const std::vector<float> rows = Rows(rng, bs);
  std::vector<uint8_t> block(bs * 584, 0xAB);
  for (int slot = 0; slot < bs; ++slot) {
    ASSERT_EQ(attnrt_sparse_mla_encode_mode2(rows.data() + slot * kD, kF32, block.data(), bs, slot),
              ATTNRT_OK);
  }
  for (int slot = 0; slot < bs; ++slot) {
    float decoded[kD];
    ref::DecodeQuantMode2BlockToken(block.data(), bs, slot, decoded);
    const uint8_t* scales = block.data() + bs * 576 + slot * 8;
    std::vector<float> scale(7);
    for (int g = 0; g < 7; ++g) {
      scale[g] = ref::E8M0ToFloat(scales[g]);
      // A power of two >= amax / 448: no code saturates.
      float amax = 0.0f;
      for (int d = g * 64; d < (g + 1) * 64; ++d)
        amax = std::max(amax, std::fabs(rows[slot * kD + d]));
      EXPECT_GE(scale[g] * 448.0f, amax);
    }
    EXPECT_EQ(scales[7], 0);
    ExpectNopeClose(rows.data() + slot * kD, decoded, scale);
    for (int d = 448; d < kD; ++d) {
      ASSERT_EQ(decoded[d], ref::Bf16ToFloat(ref::FloatToBf16(rows[slot * kD + d]))) << d;
    }
  }
}

TEST(SparseMlaEncode, Tq4RoundTripKeepsDirectionAndNorm) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const int n = 40;
  std::vector<float> rows(n * kD);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : rows) v = normal(rng);  // TQ4 expects rotated, near-Gaussian coordinates
  std::vector<uint8_t> tokens(n * 258);
  ASSERT_EQ(attnrt_sparse_mla_encode_tq4(rows.data(), kF32, n, tokens.data()), ATTNRT_OK);
  const float* codebook = attnrt_sparse_mla_tq4_codebook();
  for (int k = 0; k < 16; ++k) EXPECT_EQ(codebook[k], ref::kTq4Codebook[k]);
  for (int t = 0; t < n; ++t) {
    float decoded[kD];
    ref::DecodeTq4Token(tokens.data() + t * 258, decoded);
    double dot = 0, xx = 0, yy = 0;
    for (int d = 0; d < kD; ++d) {
      dot += double{rows[t * kD + d]} * decoded[d];
      xx += double{rows[t * kD + d]} * rows[t * kD + d];
      yy += double{decoded[d]} * decoded[d];
    }
    // A 4-bit Lloyd-Max code of Gaussian coordinates keeps cos ~0.995 on average; over 300 seeds x
    // 40 tokens the lowest seen was 0.9889 (ATTNRT_TEST_SEED=204), so 0.98 bounds the tail, while a
    // wrong codebook, nibble order or norm gives far less.
    EXPECT_GT(dot / std::sqrt(xx * yy), 0.98) << "token " << t;
    EXPECT_NEAR(std::sqrt(yy / xx), 1.0, 0.01) << "token " << t;
    // Nibble order: the code of dim 2t is the low nibble, so a coordinate and its decoded value
    // have the same sign whenever the coordinate is not tiny.
    for (int d = 0; d < kD; ++d) {
      if (std::fabs(rows[t * kD + d]) > 1.0f) {
        ASSERT_EQ(std::signbit(rows[t * kD + d]), std::signbit(decoded[d])) << d;
      }
    }
  }
}

TEST(SparseMlaEncode, ArgumentErrors) {
  std::vector<float> row(kD, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(nullptr, kF32, 1, out.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kI32, 1, out.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("kv_dtype"), std::string::npos);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode2(row.data(), kF32, out.data(), 1, 1),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("slot"), std::string::npos);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode2(row.data(), kF32, out.data(), 0, 0),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  row[7] = INFINITY;
  EXPECT_EQ(attnrt_sparse_mla_encode_tq4(row.data(), kF32, 1, out.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("dimension 7"), std::string::npos);
}

// Every token of the call is checked before any output byte is written.
TEST(SparseMlaEncode, ErrorsLeaveTheOutputUntouched) {
  std::vector<float> rows(4 * kD, 0.5f);
  rows[3 * kD + 7] = INFINITY;
  std::vector<uint8_t> out(4 * 608, 0xAB);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(rows.data(), kF32, 4, out.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("token 3"), std::string::npos)
      << attnrt_last_error_message();
  for (size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], 0xAB) << "byte " << k;
  std::vector<float> rows2(2 * kD, 0.5f);
  rows2[kD + 3] = NAN;
  std::vector<uint8_t> out2(2 * 258, 0xAB);
  EXPECT_EQ(attnrt_sparse_mla_encode_tq4(rows2.data(), kF32, 2, out2.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  for (size_t k = 0; k < out2.size(); ++k) ASSERT_EQ(out2[k], 0xAB) << "byte " << k;
  // An overflowing value in a later token also leaves the earlier ones unwritten.
  rows[3 * kD + 7] = 0.5f;
  rows[3 * kD + 500] = 3.4e38f;
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(rows.data(), kF32, 4, out.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  for (size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], 0xAB) << "byte " << k;
}

// An output that shares bytes with kv is refused before anything is written: ahead of the rows
// still to be read it changed them (one token of four came out wrong), and even an exact in-place
// call is refused rather than left to depend on the formats' sizes.
TEST(SparseMlaEncode, OutputsOverlappingTheInputAreRefused) {
  std::mt19937_64 rng(TestSeed());
  SCOPED_TRACE(SeedTrace());
  for (const bool bf16_input : {false, true}) {
    for (const size_t shift : {size_t{0}, size_t{64}, size_t{608}, size_t{1500}}) {
      SCOPED_TRACE(std::string(bf16_input ? "bf16" : "f32") + " out at kv + " +
                   std::to_string(shift));
      const std::vector<float> rows = Rows(rng, 4);
      std::vector<uint8_t> buffer(4 * kD * sizeof(float) + 4 * 608, 0);
      constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
      const attnrt_dtype dtype = bf16_input ? kBF16 : kF32;
      if (bf16_input) {
        for (size_t i = 0; i < rows.size(); ++i) {
          uint32_t bits;
          std::memcpy(&bits, &rows[i], 4);
          const uint16_t h = static_cast<uint16_t>(bits >> 16);
          std::memcpy(buffer.data() + 2 * i, &h, 2);
        }
      } else {
        std::memcpy(buffer.data(), rows.data(), rows.size() * sizeof(float));
      }
      const std::vector<uint8_t> before = buffer;
      EXPECT_EQ(attnrt_sparse_mla_encode_mode1(buffer.data(), dtype, 4, buffer.data() + shift),
                ATTNRT_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(attnrt_last_error_message()).find("overlaps kv"), std::string::npos)
          << attnrt_last_error_message();
      EXPECT_EQ(attnrt_sparse_mla_encode_tq4(buffer.data(), dtype, 4, buffer.data() + shift),
                ATTNRT_ERROR_INVALID_ARGUMENT);
      if (shift < 1024) {  // the block over the row's first bytes (rows 1024 bytes or more)
        EXPECT_EQ(attnrt_sparse_mla_encode_mode2(buffer.data(), dtype, buffer.data() + shift, 2, 1),
                  ATTNRT_ERROR_INVALID_ARGUMENT);
      }
      EXPECT_TRUE(buffer == before) << "a refused call wrote";
    }
  }
  // Adjacent buffers do not overlap.
  std::vector<uint8_t> adjacent(kD * sizeof(float) + 608);
  const std::vector<float> row = Rows(rng, 1);
  std::memcpy(adjacent.data(), row.data(), kD * sizeof(float));
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(adjacent.data(), kF32, 1,
                                           adjacent.data() + kD * sizeof(float)),
            ATTNRT_OK)
      << attnrt_last_error_message();
}

// Finite values that the format cannot hold are rejected, naming the token, value and limit.
TEST(SparseMlaEncode, ValuesThatOverflowTheFormatAreRejected) {
  std::vector<float> row(kD, 0.0f);
  row[500] = 3.4e38f;  // rounds to bf16 infinity
  std::vector<uint8_t> token(608, 0xAB);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1, token.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  std::string msg = attnrt_last_error_message();
  EXPECT_NE(msg.find("token 0 dimension 500"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  std::vector<uint8_t> block(584, 0xAB);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode2(row.data(), kF32, block.data(), 1, 0),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  for (uint8_t b : block) ASSERT_EQ(b, 0xAB);
  // The largest bf16 value itself is stored exactly.
  row[500] = 3.38953139e38f;
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1, token.data()), ATTNRT_OK);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode2(row.data(), kF32, block.data(), 1, 0), ATTNRT_OK);
  // Nope values as large as float allows: scales stay finite (codes saturate as documented).
  std::vector<float> big(kD, 3.0e38f);
  EXPECT_EQ(attnrt_sparse_mla_encode_mode1(big.data(), kF32, 1, token.data()), ATTNRT_OK);
  for (int k = 0; k < 608; k += 2) {
    uint16_t bits;
    std::memcpy(&bits, token.data() + k, 2);
    if (k < 128 || (k >= 576 && k < 590)) {
      ASSERT_LT(bits & 0x7F80, 0x7F80) << "byte " << k;
    }
  }
  // TQ4: the fp16 scale of a row of 1e5 would be infinite.
  std::vector<float> tq(kD, 1e5f);
  std::vector<uint8_t> t4(258, 0xAB);
  EXPECT_EQ(attnrt_sparse_mla_encode_tq4(tq.data(), kF32, 1, t4.data()),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  msg = attnrt_last_error_message();
  EXPECT_NE(msg.find("token 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp16"), std::string::npos) << msg;
  for (uint8_t b : t4) ASSERT_EQ(b, 0xAB);
  std::vector<float> ok(kD, 100.0f);
  ASSERT_EQ(attnrt_sparse_mla_encode_tq4(ok.data(), kF32, 1, t4.data()), ATTNRT_OK);
  uint16_t scale;
  std::memcpy(&scale, t4.data() + 256, 2);
  EXPECT_LT(scale & 0x7C00, 0x7C00);
}

// Token counts whose byte sizes overflow size_t are rejected before any access.
TEST(SparseMlaEncode, TokenCountsWhoseByteSizeOverflowAreRejected) {
  std::vector<float> row(kD, 0.5f);
  std::vector<uint8_t> out(608, 0xAB);
  for (size_t n : {SIZE_MAX, SIZE_MAX / 608 + 1, SIZE_MAX / 2048 + 1}) {
    EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kF32, n, out.data()),
              ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attnrt_last_error_message()).find("num_tokens"), std::string::npos);
    EXPECT_EQ(attnrt_sparse_mla_encode_tq4(row.data(), kF32, n, out.data()),
              ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attnrt_last_error_message()).find("num_tokens"), std::string::npos);
  }
  // bfloat16 input: 1024 bytes per token read.
  for (size_t n : {SIZE_MAX, SIZE_MAX / 1024 + 1}) {
    EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kBf16, n, out.data()),
              ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(attnrt_sparse_mla_encode_tq4(row.data(), kBf16, n, out.data()),
              ATTNRT_ERROR_INVALID_ARGUMENT);
  }
  for (uint8_t b : out) ASSERT_EQ(b, 0xAB);
}

}  // namespace
}  // namespace attnrt_test
