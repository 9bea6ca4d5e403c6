// The sparse MLA metadata (CANN MixedQuantSparseFlashMlaMetadata, attnrt's own int32 [2048] layout
// documented in abi/attnrt/ops/sparse_mla.h): a signature of everything the work partition depends
// on, and a partition of (query row, head group) items over the workers, balanced by the number of
// keys each row sees. Computed by the core; the main op checks it before its kernel runs.
#pragma once

#include <cstdint>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "core/status.h"

namespace attnrt::core::sparse_mla {

// FNV-1a 64 of the attributes, every input's presence, dtype and shape (the metadata input
// excluded), and the values of cu_seqlens_*, seqused_* and cmp_residual_kv.
uint64_t Signature(const attnrt_sparse_mla_attributes& attributes,
                   const attnrt_tensor* const* inputs, size_t num_inputs);

// Writes the 2048 words for `num_workers` workers (clamped to [1, MAX_WORKERS]).
Status BuildMetadata(const attnrt_sparse_mla_problem& problem,
                     const std::vector<attnrt_sparse_mla_batch>& batches, uint64_t signature,
                     int32_t num_workers, int32_t* out);

// Checks every word of the layout: magic, version, signature, the header against this problem,
// the worker table against the partition BuildMetadata makes for the stored worker count, and the
// reserved and unused words (zero). The message names `metadata[k]`, expected and actual.
Status CheckMetadata(const attnrt_sparse_mla_problem& problem,
                     const std::vector<attnrt_sparse_mla_batch>& batches, uint64_t signature,
                     const int32_t* metadata);

}  // namespace attnrt::core::sparse_mla
