// The sparse MLA kernel's drivers on the host's pool (part of sparse_mla_kernel.h, included at its
// end inside each ISA build): the metadata's workers, and split-KV decode (docs/sparse-mla.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

struct Job {
  const attnrt_sparse_mla_args* args = nullptr;
  // Split-KV: parts per item, the pass being run and the parts (item * parts + part).
  int64_t parts = 1;
  int64_t heads_per_group = 0;
  Pass pass = Pass::kAll;
  std::vector<SplitPart> split;
  std::vector<float> state_storage;
  std::atomic<bool> failed{false};
};

// The metadata's workers; consecutive items of one row in a worker's range run as one head range
// (wider head vectors, one decode of the row's keys).
inline void RunWorkers(void* user_data, size_t begin, size_t end) {
  auto* job = static_cast<Job*>(user_data);
  const attnrt_sparse_mla_args& a = *job->args;
  const int32_t* md = a.metadata;
  const int64_t hpg = md[5], groups = md[6], heads = a.problem->num_heads;
  try {
    Worker worker(a);
    for (size_t w = begin; w < end; ++w) {
      const int64_t first = md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w];
      const int64_t last = md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w + 1];
      for (int64_t item = first; item < last;) {
        const int64_t row = item / groups;
        const int64_t stop = std::min(last, (row + 1) * groups);
        worker.RunHeads(row, (item % groups) * hpg,
                        std::min(heads, ((stop - 1) % groups + 1) * hpg));
        item = stop;
      }
    }
  } catch (...) {
    job->failed = true;  // only std::bad_alloc can come here; reported by Run
  }
}

// Split-KV passes 1 and 2 over (item, part) tasks.
inline void RunParts(void* user_data, size_t begin, size_t end) {
  auto* job = static_cast<Job*>(user_data);
  const attnrt_sparse_mla_args& a = *job->args;
  const int64_t groups = a.metadata[6], hpg = job->heads_per_group;
  const int64_t hp = PadHeads(hpg);
  try {
    Worker worker(a);
    std::vector<float> m_start(static_cast<size_t>(hp));
    for (size_t t = begin; t < end; ++t) {
      const int64_t item = static_cast<int64_t>(t) / job->parts, part = t % job->parts;
      const int64_t h0 = (item % groups) * hpg, h1 = std::min(a.problem->num_heads, h0 + hpg);
      const float* start = nullptr;
      if (job->pass == Pass::kAttend) {
        // The golden's running max at the part's first tile: the sink, then every earlier tile
        // (a NaN maximum never raises it, as in SoftmaxTile).
        for (int64_t h = 0; h < hp; ++h) {
          m_start[h] = a.sinks != nullptr && h0 + h < h1 ? a.sinks[h0 + h] : -kInf;
        }
        for (int64_t k = 0; k < part; ++k) {
          const SplitPart& earlier = job->split[item * job->parts + k];
          for (int64_t tile = 0; tile < earlier.tiles; ++tile) {
            for (int64_t h = 0; h < hp; ++h) {
              const float x = earlier.maxima[tile * hp + h];
              m_start[h] = m_start[h] < x ? x : m_start[h];
            }
          }
        }
        start = m_start.data();
      }
      worker.RunPart(item / groups, h0, h1, part, job->parts, job->pass, start, job->split[t]);
    }
  } catch (...) {
    job->failed = true;
  }
}

inline void MergeItems(void* user_data, size_t begin, size_t end) {
  auto* job = static_cast<Job*>(user_data);
  const attnrt_sparse_mla_args& a = *job->args;
  const int64_t groups = a.metadata[6], hpg = job->heads_per_group;
  try {
    Worker worker(a);
    for (size_t item = begin; item < end; ++item) {
      const int64_t h0 = (static_cast<int64_t>(item) % groups) * hpg;
      worker.MergeParts(static_cast<int64_t>(item) / groups, h0,
                        std::min(a.problem->num_heads, h0 + hpg),
                        job->split.data() + item * job->parts, job->parts);
    }
  } catch (...) {
    job->failed = true;
  }
}

// Runs every work item of the metadata on the host's pool. Split-KV (docs/sparse-mla.md): when the
// items (rows × head groups) are fewer than the pool's threads, each item's key tiles are split in
// threads / items contiguous parts: pass 1 scores every part's tiles in parallel, pass 2 runs each
// part's softmax and P·V from the golden's running max at its first tile, and the parts' states
// are merged (O and l rescaled to the common max) into the outputs.
inline int32_t Run(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                   char* error, size_t error_capacity) {
  Job job;
  job.args = &args;
  const int32_t* md = args.metadata;
  const int64_t items = md[8];
  const int64_t threads = host.num_threads != nullptr ? host.num_threads(host.host_context) : 1;
  try {
    if (items > 0 && items < threads) {
      job.parts = threads / items;
      job.heads_per_group = md[5];
      const int64_t tasks = items * job.parts;
      const int64_t hp = PadHeads(job.heads_per_group);
      const int64_t stride = job.heads_per_group * kD + 2 * hp;
      job.state_storage.assign(static_cast<size_t>(tasks * stride), 0.0f);
      job.split.resize(static_cast<size_t>(tasks));
      for (int64_t t = 0; t < tasks; ++t) {
        float* base = job.state_storage.data() + t * stride;
        job.split[t].state = {base, base + job.heads_per_group * kD,
                              base + job.heads_per_group * kD + hp};
      }
      for (Pass pass : {Pass::kScores, Pass::kAttend}) {
        job.pass = pass;
        if (!job.failed) {
          host.parallel_for(host.host_context, static_cast<size_t>(tasks), 1, &RunParts, &job);
        }
      }
      if (!job.failed) {
        host.parallel_for(host.host_context, static_cast<size_t>(items), 1, &MergeItems, &job);
      }
    } else {
      const size_t workers = static_cast<size_t>(md[7]);
      host.parallel_for(host.host_context, workers, 1, &RunWorkers, &job);
    }
  } catch (const std::bad_alloc&) {
    job.failed = true;
  }
  if (job.failed) {
    WriteError(error, error_capacity, "out of memory for the per-worker key tiles");
    return ATTNRT_ERROR_OUT_OF_MEMORY;
  }
  return ATTNRT_OK;
}

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
