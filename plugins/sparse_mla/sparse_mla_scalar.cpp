// Scalar build of the sparse MLA kernel: the portable reference implementation of the tile
// interface (sparse_mla_kernel.h), baseline ISA (x86-64 or AArch64), every CPU. One lane per
// vector, the same blocked loops as the vector builds, std::exp, and the reference decoders of
// sparse_mla_format.h.
#include <cmath>
#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA scalar

#include "sparse_mla_format.h"

namespace attnrt::sparse_mla::scalar {

struct Vec {
  using V = float;
  static constexpr int kLanes = 1;
  static V Zero() { return 0.0f; }
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static void Store(float* p, V x) { *p = x; }
  static V Broadcast(const float* p) { return *p; }
  static V Fma(V a, V b, V c) { return a * b + c; }
  static V Add(V a, V b) { return a + b; }
  static V Sub(V a, V b) { return a - b; }
  static V Mul(V a, V b) { return a * b; }
  static float ReduceAdd(V x) { return x; }
  static V Max(V x, V y) { return y < x ? x : y; }  // y when either is NaN
  static V Exp(V x) { return std::exp(x); }
  static V RoundBf16(V x) { return scalar::RoundBf16(x); }
  static V RoundFp16(V x) { return scalar::RoundFp16(x); }
};

struct Blocking {
  static constexpr int kScoreHv = 4;
  static constexpr int kScoreKeys[5] = {0, 8, 4, 4, 4};
  static constexpr int kScoreTail = 4;
  static constexpr int kScoreDims = 64, kPvKeys = 64;
  static constexpr int kPvHeads = 4, kPvDv = 4;
};

}  // namespace attnrt::sparse_mla::scalar

#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::scalar {

struct Math {
  static constexpr int kLanes = 1;
  static constexpr int kKeyPad = 4;
  using KeyT = float;
  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
    ScalarDecodeNope(nope, scales, dst);
  }
  static void DecodeBf16(const uint8_t* src, int n, float* dst) { ScalarDecodeBf16(src, n, dst); }
  static void DecodeFp16(const uint8_t* src, int n, float* dst) { ScalarDecodeFp16(src, n, dst); }
  static void DecodeTq4(const uint8_t* codes, float scale, bool fp16, float* dst) {
    if (fp16) {
      ScalarDecodeTq4Fp16(codes, scale, dst);
    } else {
      ScalarDecodeTq4Bf16(codes, scale, dst);
    }
  }
  static void ZeroRow(float* dst) {
    for (int d = 0; d < kTileDim; ++d) dst[d] = 0.0f;
  }
  static void ScoreTile(const float* qt, int hp, const float* tile, int rows, float* s) {
    ScoreTileBlocked<Vec, Blocking>(qt, hp, tile, rows, s);
  }
  static void PvTile(const float* p, int hp, int nt, const float* tile, const float* alpha, int nh,
                     float* o) {
    PvTileBlocked<Vec, Blocking>(p, hp, nt, tile, alpha, nh, o);
  }
};

}  // namespace attnrt::sparse_mla::scalar

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunScalar(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity) {
  return scalar::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
