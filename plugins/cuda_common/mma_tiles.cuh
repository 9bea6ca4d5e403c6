// Warp-level tensor-core tiles shared by the flash and decode kernels: S = Q K^T for 16 query rows
// against kKeys keys, and O += P V, with operands in shared memory rows of kRow elements (H plus a
// 16-byte pad, so that the eight rows one ldmatrix phase reads fall in distinct banks).
//
// ldmatrix.m8n8.x4 (PTX ISA): lanes 8i..8i+7 give the row addresses of matrix i; every lane gets
// one register per matrix holding row lane/4, columns 2(lane%4)..+1 (with .trans: rows
// 2(lane%4)..+1, column lane/4). Chosen as below, the four matrices are exactly the mma.m16n8k16
// fragments of cuda_types.cuh: the A fragment of 16 query rows, the B fragments of two 8-key tiles
// of K (row-major K is column-major B), and with .trans the B fragments of two 8-column tiles of V.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda_types.cuh"

namespace attnrt::cuda {

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// cp.async (sm_80+): a 16-byte global-to-shared copy that completes asynchronously; with
// valid == false nothing is read and the 16 bytes are zero-filled (src-size 0).
__device__ __forceinline__ void CpAsync16(void* smem, const void* global, bool valid) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// sc (zeroed by the caller) += Q[16 x H] K[kKeys x H]^T; q points at the warp's first query row.
template <typename Tr, int H, int kKeys, int kRow>
__device__ __forceinline__ void QkTile(float (&sc)[kKeys / 8][4], const typename Tr::T* q,
                                       const typename Tr::T* k, int lane) {
  static_assert(kKeys % 16 == 0 && H % 16 == 0, "tiles of 16");
#pragma unroll
  for (int kstep = 0; kstep < H / 16; ++kstep) {
    uint32_t a[4];
    // Matrices: rows 0-7 / 8-15 at columns +0, then rows 0-7 / 8-15 at columns +8.
    LdMatrixX4(a, q + (lane % 16) * kRow + kstep * 16 + (lane / 16) * 8);
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; nt += 2) {
      uint32_t b[4];
      // Matrices: keys nt*8..+7 at dims +0 / +8, then keys (nt+1)*8..+7 at dims +0 / +8.
      LdMatrixX4(b, k + (nt * 8 + (lane % 8) + (lane / 16) * 8) * kRow + kstep * 16 +
                        ((lane / 8) % 2) * 8);
      Tr::Mma(sc[nt], a, b[0], b[1]);
      Tr::Mma(sc[nt + 1], a, b[2], b[3]);
    }
  }
}

// o += P[16 x kKeys] V[kKeys x H], P taken from the score registers (the C layout of two 8-key
// tiles is the A layout of one 16-key step).
template <typename Tr, int H, int kKeys, int kRow>
__device__ __forceinline__ void PvTile(float (&o)[H / 8][4], const float (&p)[kKeys / 8][4],
                                       const typename Tr::T* v, int lane) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    uint32_t a[4];
    a[0] = Tr::Pack(p[2 * kk][0], p[2 * kk][1]);
    a[1] = Tr::Pack(p[2 * kk][2], p[2 * kk][3]);
    a[2] = Tr::Pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = Tr::Pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int dt = 0; dt < H / 8; dt += 2) {
      uint32_t b[4];
      // Matrices (transposed): keys 0-7 / 8-15 at columns dt*8, then at columns (dt+1)*8.
      LdMatrixX4Trans(
          b, v + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kRow + (dt + lane / 16) * 8);
      Tr::Mma(o[dt], a, b[0], b[1]);
      Tr::Mma(o[dt + 1], a, b[2], b[3]);
    }
  }
}

// One online-softmax step (FlashAttention-2) of a warp's 16 query rows over a kKeys-key score
// tile in the mma C layout (this thread holds two rows: elements 0-1 and 2-3): the tile's row
// maxima (tile_max, per thread, reduced over the quad here) update m_row, the scores become
// exp(s - m) in place and add into l_row, and the accumulator o is rescaled by exp(m_old - m_new).
// A row whose scores were all -inf so far keeps m = -inf and takes zeros (exp(-inf - 0)).
template <int H, int kKeys>
__device__ __forceinline__ void OnlineSoftmaxStep(float (&sc)[kKeys / 8][4],
                                                  const float (&tile_max)[2], float (&m_row)[2],
                                                  float (&l_row)[2], float (&o)[H / 8][4]) {
  float corr[2], m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m_row[h], QuadMax(tile_max[h]));
    m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
    corr[h] = __expf(m_row[h] - m_use[h]);
    m_row[h] = m_new;
    l_row[h] *= corr[h];
  }
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = __expf(sc[nt][e] - m_use[e / 2]);
      sc[nt][e] = pr;
      l_row[e / 2] += pr;
    }
  }
#pragma unroll
  for (int dt = 0; dt < H / 8; ++dt) {
    o[dt][0] *= corr[0];
    o[dt][1] *= corr[0];
    o[dt][2] *= corr[1];
    o[dt][3] *= corr[1];
  }
}

}  // namespace attnrt::cuda
