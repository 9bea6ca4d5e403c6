// Scalar build of the sparse MLA kernel: the reference kernel, baseline x86-64, every CPU.
#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA scalar

namespace attnrt::sparse_mla::scalar {

// 512-wide fp32 primitives with four partial sums (the same reassociation on every CPU).
struct Math {
  static float Dot(const float* q, const float* k) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int d = 0; d < 512; d += 4) {
      for (int u = 0; u < 4; ++u) acc[u] += q[d + u] * k[d + u];
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  static void Axpy(float* o, float p, const float* v) {
    for (int d = 0; d < 512; ++d) o[d] += p * v[d];
  }
  static void Scale(float* o, float a) {
    for (int d = 0; d < 512; ++d) o[d] *= a;
  }
  // Token decoding: the reference decoders of sparse_mla_format.h.
  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst);
  static void DecodeBf16(const uint8_t* src, int n, float* dst);
  static void DecodeTq4Bf16(const uint8_t* codes, float scale, float* dst);
};

}  // namespace attnrt::sparse_mla::scalar

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

void scalar::Math::DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
  ScalarDecodeNope(nope, scales, dst);
}
void scalar::Math::DecodeBf16(const uint8_t* src, int n, float* dst) {
  ScalarDecodeBf16(src, n, dst);
}
void scalar::Math::DecodeTq4Bf16(const uint8_t* codes, float scale, float* dst) {
  ScalarDecodeTq4Bf16(codes, scale, dst);
}

int32_t RunScalar(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity) {
  return scalar::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
