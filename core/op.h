// Ops and plans: an op is validated attributes bound to a runtime; a plan is a
// validated shape signature with its chosen kernel and workspace size. Plans are cached per op by
// signature, so a decode loop over fixed-shape buffers plans once; the cache keeps the runtime's
// plan_cache_size plans, the least recently used dropped first. A decode over a cache that grows
// every step (OpFamily::GrowingDims) plans once per capacity: the plan's workspace is sized for the
// growing extents rounded up to a power of two, and it runs every extent up to that capacity that
// its kernel accepts within that workspace.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/ops/op_family.h"
#include "core/registry.h"
#include "core/runtime.h"

namespace attnrt::core {

// Everything of a tensor that a plan depends on (never its data).
struct TensorSignature {
  bool present = false;
  attnrt_dtype dtype{};
  attnrt_device device{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty = compact

  bool operator==(const TensorSignature& other) const;
};

struct Signature {
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;

  std::vector<int64_t> Key() const;
};

// Workspaces a plan keeps for runs given none (one per run in flight; freed with the plan).
struct WorkspacePool {
  std::mutex mutex;
  std::vector<std::unique_ptr<void, decltype(&std::free)>> spare;
};

// One run's workspace from a plan's pool, given back when the run ends.
class WorkspaceLease {
 public:
  explicit WorkspaceLease(WorkspacePool& pool) : pool_(pool) {}
  ~WorkspaceLease();
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  // A spare workspace of the pool, else a new one of `size` bytes aligned to `alignment`; null
  // when it cannot be allocated.
  void* Borrow(size_t size, size_t alignment);

 private:
  WorkspacePool& pool_;
  std::unique_ptr<void, decltype(&std::free)> buffer_{nullptr, &std::free};
};

class PlanImpl {
 public:
  std::shared_ptr<RuntimeState> runtime;
  std::shared_ptr<const OpFamily> family;
  std::unique_ptr<Problem> problem;
  const KernelRecord* kernel = nullptr;
  Signature signature;
  std::string description;  // human-readable signature
  size_t workspace_size = 0;
  static constexpr size_t kWorkspaceAlignment = 64;
  // A plan for a growing cache: the growing dimensions and the extent they may reach in a run
  // (capacity_signature is the signature with every growing extent at that capacity). Empty: the
  // plan runs its signature only.
  std::vector<DimRef> growing;
  int64_t capacity = 0;
  Signature capacity_signature;

  // The chosen kernel's name, or "core" for an op the core computes itself.
  const std::string& kernel_name() const;

  Status Run(const TensorList& inputs, const TensorList& outputs, void* workspace,
             size_t workspace_size_given, void* stream) const;
  // For a growing-cache plan and a problem of other growing extents: OK when the plan's kernel
  // accepts it and needs no more workspace than the plan's, else why not.
  Status Covers(const Problem& problem) const;

 private:
  mutable WorkspacePool spare_workspaces_;
};

class OpImpl {
 public:
  OpImpl(std::shared_ptr<RuntimeState> runtime, std::shared_ptr<const OpFamily> family)
      : runtime_(std::move(runtime)),
        family_(std::move(family)),
        capacity_(runtime_->config().plan_cache_size) {}

  Status Plan(const TensorList& inputs, const TensorList& outputs,
              std::shared_ptr<const PlanImpl>* out);
  Status Explain(const TensorList& inputs, const TensorList& outputs,
                 std::vector<Candidate>* out) const;
  const std::shared_ptr<RuntimeState>& runtime() const { return runtime_; }
  void CacheStats(uint64_t* hits, uint64_t* misses) const {
    *hits = hits_.load();
    *misses = misses_.load();
  }
  attnrt_plan_cache_info CacheInfo() const;

 private:
  Status Prepare(const TensorList& inputs, const TensorList& outputs, Signature* signature,
                 std::unique_ptr<Problem>* problem) const;

  using Key = std::vector<int64_t>;
  struct CacheEntry {
    std::shared_ptr<const PlanImpl> plan;
    std::list<const Key*>::iterator recency;  // its place in recency_
  };
  // The cached plan of `key` (marked most recently used), or null. Caller holds mutex_.
  std::shared_ptr<const PlanImpl> Lookup(const Key& key);
  // Caches `plan` under `key` unless another thread did meanwhile, then drops the least recently
  // used plans beyond capacity; returns the plan cached under `key` (or `plan` with capacity 0).
  std::shared_ptr<const PlanImpl> Insert(const Key& key, std::shared_ptr<const PlanImpl> plan);

  std::shared_ptr<RuntimeState> runtime_;
  std::shared_ptr<const OpFamily> family_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::map<Key, CacheEntry> cache_;
  std::list<const Key*> recency_;  // keys of cache_, most recently used first
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> evictions_{0};
};

// Checks the generic well-formedness of every tensor (ndim range, shape pointer, extents) and
// records its signature; `require_data` also demands data for non-empty tensors (run time).
Status ReadSignature(const OpFamily& family, const TensorList& inputs, const TensorList& outputs,
                     bool require_data, Signature* out);

}  // namespace attnrt::core

struct attnrt_op {
  std::unique_ptr<attnrt::core::OpImpl> impl;
};

struct attnrt_plan {
  std::shared_ptr<const attnrt::core::PlanImpl> impl;
};

struct attnrt_explanation {
  // Candidates point into the runtime's registry; holding the state keeps them valid.
  std::shared_ptr<attnrt::core::RuntimeState> runtime;
  std::vector<attnrt::core::Candidate> candidates;
};
