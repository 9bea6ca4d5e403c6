// Runtimes, ops and plans of the torch operators (see runtimes.h).
#include "bindings/torch/runtimes.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <utility>

#include "bindings/torch/tensors.h"

namespace attnrt_torch {

void ThrowStatus(attnrt_status status) {
  std::string message =
      std::string(attnrt_status_name(status)) + ": " + attnrt_last_error_message();
  if (status == ATTNRT_ERROR_INVALID_ARGUMENT) TORCH_CHECK_VALUE(false, message);
  TORCH_CHECK(false, message);
}

// ---- plans ------------------------------------------------------------------------------------

bool PlanKey::Add(const attnrt_tensor* t) {
  const size_t need = t == nullptr ? 1 : 3 + 2 * static_cast<size_t>(t->ndim > 0 ? t->ndim : 0);
  if (size + need > kCapacity) return false;
  if (t == nullptr) {
    values[size++] = -1;
    return true;
  }
  values[size++] = t->ndim;
  values[size++] = (int64_t{t->dtype.code} << 24) | (int64_t{t->dtype.bits} << 8) |
                   int64_t{t->dtype.lanes & 0xff};
  values[size++] = (int64_t{t->device.device_type} << 32) | uint32_t(t->device.device_id);
  for (int32_t d = 0; d < t->ndim; ++d) values[size++] = t->shape[d];
  for (int32_t d = 0; d < t->ndim; ++d) values[size++] = t->strides ? t->strides[d] : -1;
  return true;
}

void PlanKey::Finish() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<uint64_t>(values[i]);
    h *= 1099511628211ull;
  }
  hash = static_cast<size_t>(h);
}

bool PlanKey::operator==(const PlanKey& other) const {
  return size == other.size &&
         std::memcmp(values.data(), other.values.data(), size * sizeof(int64_t)) == 0;
}

CachedPlan CachedOp::Plan(const attnrt_tensor* const* inputs, size_t num_inputs,
                          const attnrt_tensor* const* outputs, size_t num_outputs) {
  PlanKey key;
  bool cacheable = true;
  for (size_t i = 0; i < num_inputs && cacheable; ++i) cacheable = key.Add(inputs[i]);
  for (size_t i = 0; i < num_outputs && cacheable; ++i) cacheable = key.Add(outputs[i]);
  key.Finish();
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      ++hits_;
      return it->second;
    }
  }
  attnrt_plan* raw = nullptr;
  const attnrt_status status = attnrt_op_plan(op_, inputs, num_inputs, outputs, num_outputs, &raw);
  if (status != ATTNRT_OK) ThrowStatus(status);
  CachedPlan cached;
  cached.plan.reset(raw, attnrt_plan_release);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  const attnrt_status info_status = attnrt_plan_get_info(raw, &info);
  if (info_status != ATTNRT_OK) ThrowStatus(info_status);
  cached.workspace_size = info.workspace_size;
  cached.workspace_alignment = info.workspace_alignment > 0 ? info.workspace_alignment : 1;
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  if (cacheable) {
    // Signatures come and go with an engine's batch composition: past the limit, start over
    // (the runtime's own plan cache still answers the signatures seen before).
    if (plans_.size() >= kMaxPlans) plans_.clear();
    plans_.emplace(key, cached);
  }
  return cached;
}

uint64_t CachedOp::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

uint64_t CachedOp::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

std::shared_ptr<const std::vector<int32_t>> SparseMlaOps::Metadata(
    const attnrt_tensor* const* inputs, size_t num_inputs) {
  PlanKey key;
  bool cacheable = true;
  for (size_t i = 0; i < num_inputs && cacheable; ++i) cacheable = key.Add(inputs[i]);
  key.Finish();
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = metadata_.find(key);
    if (it != metadata_.end()) {
      ++hits_;
      return it->second;
    }
  }
  auto metadata = std::make_shared<std::vector<int32_t>>(ATTNRT_SPARSE_MLA_METADATA_SIZE);
  const int64_t shape[1] = {ATTNRT_SPARSE_MLA_METADATA_SIZE};
  const int64_t strides[1] = {1};
  const attnrt_tensor out = HostInt32(metadata->data(), shape, strides);
  const attnrt_tensor* outputs[1] = {&out};
  const CachedPlan plan = metadata_op_.Plan(inputs, num_inputs, outputs, 1);
  const attnrt_status status = attnrt_plan_run(
      plan.plan.get(), inputs, num_inputs, outputs, 1,
      Workspace(plan.workspace_size, plan.workspace_alignment), plan.workspace_size, nullptr);
  if (status != ATTNRT_OK) ThrowStatus(status);
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  if (cacheable) {
    if (metadata_.size() >= kMaxMetadata) metadata_.clear();
    metadata_.emplace(key, metadata);
  }
  return metadata;
}

uint64_t SparseMlaOps::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

uint64_t SparseMlaOps::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

bool SparseMlaKey::operator==(const SparseMlaKey& other) const {
  const attnrt_sparse_mla_attributes &a = attributes, &b = other.attributes;
  return a.quant_mode == b.quant_mode && a.rope_head_dim == b.rope_head_dim &&
         std::memcmp(&a.softmax_scale, &b.softmax_scale, sizeof(float)) == 0 &&
         a.cmp_ratio == b.cmp_ratio && a.ori_mask_mode == b.ori_mask_mode &&
         a.cmp_mask_mode == b.cmp_mask_mode && a.ori_win_left == b.ori_win_left &&
         a.ori_win_right == b.ori_win_right && a.layout_q == b.layout_q &&
         a.layout_kv == b.layout_kv && a.topk_value_mode == b.topk_value_mode &&
         a.return_softmax_lse == b.return_softmax_lse;
}

// ---- runtimes and ops ---------------------------------------------------------------------------

bool OpKey::operator==(const OpKey& o) const {
  return num_heads == o.num_heads && kv_num_heads == o.kv_num_heads && block_size == o.block_size &&
         kv_layout == o.kv_layout && std::memcmp(&scale, &o.scale, sizeof(float)) == 0 &&
         std::memcmp(&softcap, &o.softcap, sizeof(float)) == 0 &&
         local_window_size == o.local_window_size && p_precision == o.p_precision &&
         causal == o.causal && quant_type == o.quant_type &&
         kv_cache_bit_width == o.kv_cache_bit_width && local_window_right == o.local_window_right;
}

namespace {

struct RuntimeEntry {
  attnrt_runtime* handle = nullptr;  // borrowed, or owned for id 0 and when `owned`
  bool owned = false;
  std::vector<std::pair<OpKey, std::shared_ptr<CachedOp>>> ops;
  std::vector<std::pair<SparseMlaKey, std::shared_ptr<SparseMlaOps>>> sparse_mla_ops;
};

// Ops per runtime: a model has a few attribute sets (per layer kind); past this many the oldest
// go first.
constexpr size_t kMaxOps = 64;

struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, RuntimeEntry> runtimes;
  int64_t next_id = 1;
  int64_t default_id = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: ops may run during interpreter exit
  return *r;
}

// Entry `id` (kDefaultRuntime: the chosen default); the library's own runtime is made here.
// Called with the registry's mutex held.
RuntimeEntry& Entry(Registry& r, int64_t id) {
  if (id == kDefaultRuntime) id = r.default_id;
  auto it = r.runtimes.find(id);
  if (it != r.runtimes.end()) {
    ATTNRT_TORCH_CHECK_ARG(it->second.handle != nullptr, "runtime is closed (the runtime ",
                           "registered as ", id, " was closed or released)");
    return it->second;
  }
  ATTNRT_TORCH_CHECK_ARG(
      id == 0, "runtime: no attnrt runtime is registered under id ", id,
      " (ids come from attnrt._register_runtime and attnrt._torch_threads_runtime)");
  attnrt_runtime* handle = nullptr;
  const attnrt_status status = attnrt_runtime_create(nullptr, &handle);
  if (status != ATTNRT_OK) ThrowStatus(status);
  RuntimeEntry& e = r.runtimes[0];
  e.handle = handle;
  return e;
}

}  // namespace

int64_t RegisterRuntime(int64_t handle) {
  ATTNRT_TORCH_CHECK_ARG(handle != 0, "handle: expected the address of an attnrt_runtime, got 0");
  // libattnrt refuses a handle that is no live runtime (it keeps the set of them) without reading
  // it: a stale or made-up address is an error here, not a crash at the first call.
  int32_t threads = 0;
  const attnrt_status status =
      attnrt_runtime_num_threads(reinterpret_cast<attnrt_runtime*>(handle), &threads);
  if (status != ATTNRT_OK) ThrowStatus(status);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t id = r.next_id++;
  r.runtimes[id].handle = reinterpret_cast<attnrt_runtime*>(handle);
  return id;
}

int64_t RegisterOwnedRuntime(attnrt_runtime* runtime) {
  ATTNRT_TORCH_CHECK_ARG(runtime != nullptr, "runtime: expected an attnrt_runtime, got NULL");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t id = r.next_id++;
  RuntimeEntry& e = r.runtimes[id];
  e.handle = runtime;
  e.owned = true;
  return id;
}

void ReleaseRuntime(int64_t id) {
  if (id <= 0) return;
  // Destroyed outside the lock; a call running on one of its ops keeps the runtime's state (and
  // its executor's pool) alive until it returns.
  std::vector<std::pair<OpKey, std::shared_ptr<CachedOp>>> ops;
  std::vector<std::pair<SparseMlaKey, std::shared_ptr<SparseMlaOps>>> sparse_mla_ops;
  std::unique_ptr<attnrt_runtime, void (*)(attnrt_runtime*)> owned(nullptr, attnrt_runtime_destroy);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.runtimes.find(id);
  if (it == r.runtimes.end()) return;
  // Kept as closed: a call naming it (as the default) fails as the Python path does.
  ops.swap(it->second.ops);
  sparse_mla_ops.swap(it->second.sparse_mla_ops);
  if (it->second.owned) owned.reset(it->second.handle);
  it->second.handle = nullptr;
}

void UseRuntime(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ATTNRT_TORCH_CHECK_ARG(id == 0 || r.runtimes.count(id) != 0,
                         "runtime: no attnrt runtime is registered under id ", id);
  r.default_id = id;
}

std::shared_ptr<CachedOp> VarlenOp(int64_t id, const OpKey& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  RuntimeEntry& e = Entry(r, id);
  for (auto& [k, op] : e.ops) {
    if (k == key) return op;
  }
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = key.num_heads;
  a.gqa.kv_num_heads = key.kv_num_heads;
  a.gqa.scale = key.scale;
  a.gqa.softcap = key.softcap;
  a.gqa.local_window_size = key.local_window_size;
  a.gqa.causal = key.causal;
  a.local_window_right = key.local_window_right;
  a.gqa.k_quant_type = a.gqa.v_quant_type = key.quant_type;
  a.gqa.kv_cache_bit_width = key.kv_cache_bit_width;
  a.block_size = key.block_size;
  a.kv_layout = key.kv_layout;
  a.p_precision = key.p_precision;
  attnrt_op* raw = nullptr;
  const attnrt_status status = attnrt_op_create(e.handle, ATTNRT_OP_PAGED_GQA_VARLEN, &a, &raw);
  if (status != ATTNRT_OK) ThrowStatus(status);
  auto op = std::make_shared<CachedOp>(raw);
  if (e.ops.size() >= kMaxOps) e.ops.erase(e.ops.begin());
  e.ops.emplace_back(key, op);
  return op;
}

std::shared_ptr<SparseMlaOps> SparseMlaOpsFor(int64_t id, const SparseMlaKey& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  RuntimeEntry& e = Entry(r, id);
  for (auto& [k, ops] : e.sparse_mla_ops) {
    if (k == key) return ops;
  }
  attnrt_op* metadata_op = nullptr;
  attnrt_status status =
      attnrt_op_create(e.handle, ATTNRT_OP_SPARSE_MLA_METADATA, &key.attributes, &metadata_op);
  if (status != ATTNRT_OK) ThrowStatus(status);
  attnrt_op* op = nullptr;
  status = attnrt_op_create(e.handle, ATTNRT_OP_SPARSE_MLA, &key.attributes, &op);
  if (status != ATTNRT_OK) {
    attnrt_op_destroy(metadata_op);
    ThrowStatus(status);
  }
  auto ops = std::make_shared<SparseMlaOps>(metadata_op, op);
  if (e.sparse_mla_ops.size() >= kMaxOps) e.sparse_mla_ops.erase(e.sparse_mla_ops.begin());
  e.sparse_mla_ops.emplace_back(key, ops);
  return ops;
}

std::vector<int64_t> RuntimeStats(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  RuntimeEntry& e = Entry(r, id);
  int64_t hits = 0, misses = 0;
  for (auto& [k, op] : e.ops) {
    hits += static_cast<int64_t>(op->hits());
    misses += static_cast<int64_t>(op->misses());
  }
  for (auto& [k, ops] : e.sparse_mla_ops) {
    hits += static_cast<int64_t>(ops->hits());
    misses += static_cast<int64_t>(ops->misses());
  }
  return {static_cast<int64_t>(e.ops.size() + e.sparse_mla_ops.size()), hits, misses};
}

}  // namespace attnrt_torch
