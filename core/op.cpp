#include "core/op.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>

#include "core/host_snapshot.h"
#include "core/ops/tensor_checks.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

constexpr int32_t kMaxRank = 8;
constexpr size_t kReasonCapacity = 512;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string TensorText(const TensorSignature& t) {
  if (!t.present) return "absent";
  std::string text = DtypeString(t.dtype) + ShapeText(t.shape);
  if (t.device.device_type != ATTNRT_DEVICE_CPU) {
    text += "@" + std::to_string(t.device.device_type) + ":" + std::to_string(t.device.device_id);
  }
  if (!t.strides.empty()) text += " strides " + ShapeText(t.strides);
  return text;
}

std::string Describe(const OpFamily& family, const Signature& signature) {
  std::string text;
  auto append = [&](const char* name, const TensorSignature& t) {
    if (!t.present) return;
    if (!text.empty()) text += " ";
    text += std::string(name) + "=" + TensorText(t);
  };
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    append(family.input_name(i), signature.inputs[i]);
  }
  text += " ->";
  for (size_t i = 0; i < signature.outputs.size(); ++i) {
    append(family.output_name(i), signature.outputs[i]);
  }
  const std::string attributes = family.AttributeText();
  if (!attributes.empty()) text += " " + attributes;
  return text;
}

// ---- plans for a growing cache (OpFamily::GrowingDims) ----------------------------------------

// Growing extents are planned for the next power of two, at least this; none beyond the maximum.
constexpr int64_t kMinGrowthCapacity = 16;
constexpr int64_t kMaxGrowthCapacity = int64_t{1} << 40;

TensorSignature* DimTensor(Signature& s, const DimRef& d) {
  auto& tensors = d.output ? s.outputs : s.inputs;
  if (d.index >= tensors.size()) return nullptr;
  TensorSignature& t = tensors[d.index];
  return t.present && d.dim >= 0 && static_cast<size_t>(d.dim) < t.shape.size() ? &t : nullptr;
}

// The capacity a plan of these growing dimensions is made for, or 0 when they cannot grow: a
// strided tensor among them (its strides follow its extents), or an extent beyond the maximum.
int64_t GrowthCapacity(Signature s, const std::vector<DimRef>& dims) {
  int64_t longest = 0;
  for (const auto& d : dims) {
    const TensorSignature* t = DimTensor(s, d);
    if (t == nullptr || !t->strides.empty()) return 0;
    longest = std::max(longest, t->shape[d.dim]);
  }
  if (dims.empty() || longest > kMaxGrowthCapacity) return 0;
  int64_t capacity = kMinGrowthCapacity;
  while (capacity < longest) capacity *= 2;
  return capacity;
}

Signature WithExtent(Signature s, const std::vector<DimRef>& dims, int64_t extent) {
  for (const auto& d : dims) {
    if (TensorSignature* t = DimTensor(s, d)) t->shape[d.dim] = extent;
  }
  return s;
}

// The family's problem for these tensors with every growing extent set to `extent` (compact).
Status PrepareWithExtent(const OpFamily& family, const TensorList& inputs,
                         const TensorList& outputs, const std::vector<DimRef>& dims, int64_t extent,
                         std::unique_ptr<Problem>* out) {
  struct Copies {
    std::vector<attnrt_tensor> tensors;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<const attnrt_tensor*> pointers;
  };
  auto copy = [](const TensorList& list) {
    Copies c{std::vector<attnrt_tensor>(list.count), std::vector<std::vector<int64_t>>(list.count),
             std::vector<const attnrt_tensor*>(list.count)};
    for (size_t i = 0; i < list.count; ++i) {
      const attnrt_tensor* t = list.at(i);
      if (t == nullptr) continue;
      c.tensors[i] = *t;
      c.shapes[i].assign(t->shape, t->shape + t->ndim);
      c.tensors[i].shape = c.shapes[i].data();
      c.tensors[i].strides = nullptr;
      c.pointers[i] = &c.tensors[i];
    }
    return c;
  };
  Copies in = copy(inputs);
  Copies out_copies = copy(outputs);
  for (const auto& d : dims) {
    Copies& c = d.output ? out_copies : in;
    if (d.index < c.pointers.size() && c.pointers[d.index] != nullptr &&
        static_cast<size_t>(d.dim) < c.shapes[d.index].size()) {
      c.shapes[d.index][d.dim] = extent;
    }
  }
  return family.Prepare({in.pointers.data(), in.pointers.size()},
                        {out_copies.pointers.data(), out_copies.pointers.size()}, out);
}

// OK when `kernel` accepts `problem` within `workspace` bytes, else why not (PLAN_MISMATCH: these
// tensors need another plan). `needed` receives the kernel's workspace size.
Status KernelFits(const KernelRecord& kernel, const Problem& problem, size_t workspace,
                  size_t* needed) {
  char reason[kReasonCapacity] = {0};
  int32_t accepted = 0;
  const std::string thrown = CallPlugin([&] {
    accepted = kernel.desc->supports(kernel.plugin->context, problem.abi_for_kernel(kernel), reason,
                                     sizeof(reason));
  });
  if (!thrown.empty()) std::snprintf(reason, sizeof(reason), "supports() %s", thrown.c_str());
  reason[sizeof(reason) - 1] = '\0';
  if (accepted != 1) {
    return PlanMismatch("kernel " + kernel.name + " of the plan declines these tensors: " +
                        (reason[0] != '\0' ? reason : "no reason given") +
                        "; make a plan for these tensors");
  }
  const std::string failure = CallPlugin([&] {
    *needed = kernel.desc->workspace_size(kernel.plugin->context, problem.abi_for_kernel(kernel));
  });
  if (!failure.empty()) return Internal("kernel " + kernel.name + ": workspace_size() " + failure);
  if (*needed > workspace) {
    return PlanMismatch("these tensors need a workspace of " + std::to_string(*needed) +
                        " bytes, more than the plan's " + std::to_string(workspace) +
                        "; make a plan for these tensors");
  }
  return Status::Ok();
}

// "past_key, past_value dimension 2 up to 1024" for a plan's description.
std::string GrowthText(const OpFamily& family, const std::vector<DimRef>& dims, int64_t capacity) {
  std::string names;
  for (const auto& d : dims) {
    if (!names.empty()) names += ", ";
    names += std::string(d.output ? family.output_name(d.index) : family.input_name(d.index)) +
             " dimension " + std::to_string(d.dim);
  }
  return names + " up to " + std::to_string(capacity);
}

Status ReadTensor(const char* role, const char* name, const attnrt_tensor* tensor,
                  bool require_data, TensorSignature* out) {
  *out = TensorSignature{};
  if (tensor == nullptr) return Status::Ok();
  const std::string who = std::string(role) + " '" + name + "'";
  if (tensor->ndim < 0 || tensor->ndim > kMaxRank) {
    return InvalidArgument(who + ": ndim must be in [0, " + std::to_string(kMaxRank) + "], got " +
                           std::to_string(tensor->ndim));
  }
  if (tensor->ndim > 0 && tensor->shape == nullptr) {
    return InvalidArgument(who + ": shape is NULL for ndim " + std::to_string(tensor->ndim));
  }
  if (tensor->dtype.lanes != 1) {
    return InvalidArgument(who + ": dtype lanes must be 1, got " +
                           std::to_string(tensor->dtype.lanes));
  }
  out->present = true;
  out->dtype = tensor->dtype;
  out->device = tensor->device;
  int64_t elements = 1;
  for (int32_t d = 0; d < tensor->ndim; ++d) {
    const int64_t extent = tensor->shape[d];
    if (extent < 0) {
      return InvalidArgument(who + ": dimension " + std::to_string(d) + " must be >= 0, got " +
                             std::to_string(extent));
    }
    if (extent > 0 && elements > (int64_t{1} << 48) / extent) {
      return InvalidArgument(who + ": more than 2^48 elements (shape dimension " +
                             std::to_string(d) + " = " + std::to_string(extent) + ")");
    }
    elements *= extent;
    out->shape.push_back(extent);
  }
  if (tensor->strides != nullptr) {
    // Compact strides are the same as NULL; anything else is kept so validation can name it. Next
    // to a zero extent, the other extents may multiply past int64 ({0, 2^63-1, 2^63-1}): no int64
    // stride equals such a product, so the tensor is not compact.
    int64_t expected = 1;
    bool representable = true;
    bool compact = true;
    for (int32_t d = tensor->ndim - 1; d >= 0; --d) {
      if (tensor->shape[d] != 1 && (!representable || tensor->strides[d] != expected)) {
        compact = false;
      }
      if (representable && __builtin_mul_overflow(expected, tensor->shape[d], &expected)) {
        representable = false;
      }
    }
    if (!compact) out->strides.assign(tensor->strides, tensor->strides + tensor->ndim);
  }
  if (require_data && elements > 0) {
    if (tensor->data == nullptr) {
      return InvalidArgument(who + ": data is NULL for a tensor of shape " + ShapeText(out->shape));
    }
    // Kernels access elements through typed pointers: element 0 must be aligned to its size.
    const uint64_t alignment = std::max<uint64_t>(1, tensor->dtype.bits / 8);
    const uint64_t address = reinterpret_cast<uintptr_t>(tensor->data) + tensor->byte_offset;
    if (address % alignment != 0) {
      return InvalidArgument(who + ": data + byte_offset must be aligned to " +
                             std::to_string(alignment) + " bytes for " +
                             DtypeString(tensor->dtype) + ", got an address " +
                             std::to_string(address % alignment) + " bytes past a boundary" +
                             " (byte_offset " + std::to_string(tensor->byte_offset) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

bool TensorSignature::operator==(const TensorSignature& other) const {
  return present == other.present && dtype.code == other.dtype.code &&
         dtype.bits == other.dtype.bits && dtype.lanes == other.dtype.lanes &&
         device.device_type == other.device.device_type &&
         device.device_id == other.device.device_id && shape == other.shape &&
         strides == other.strides;
}

std::vector<int64_t> Signature::Key() const {
  std::vector<int64_t> key;
  auto append = [&](const TensorSignature& t) {
    key.push_back(t.present ? 1 : 0);
    if (!t.present) return;
    key.push_back((int64_t{t.dtype.code} << 32) | (int64_t{t.dtype.bits} << 16) | t.dtype.lanes);
    key.push_back((int64_t{t.device.device_type} << 32) | uint32_t(t.device.device_id));
    key.push_back(static_cast<int64_t>(t.shape.size()));
    key.insert(key.end(), t.shape.begin(), t.shape.end());
    key.push_back(static_cast<int64_t>(t.strides.size()));
    key.insert(key.end(), t.strides.begin(), t.strides.end());
  };
  for (const auto& t : inputs) append(t);
  key.push_back(-1);
  for (const auto& t : outputs) append(t);
  return key;
}

Status ReadSignature(const OpFamily& family, const TensorList& inputs, const TensorList& outputs,
                     bool require_data, Signature* out) {
  if (inputs.count > 0 && inputs.tensors == nullptr) {
    return InvalidArgument("inputs: NULL array for num_inputs " + std::to_string(inputs.count));
  }
  if (outputs.count > 0 && outputs.tensors == nullptr) {
    return InvalidArgument("outputs: NULL array for num_outputs " + std::to_string(outputs.count));
  }
  if (inputs.count > family.max_inputs()) {
    return InvalidArgument("num_inputs: expected at most " + std::to_string(family.max_inputs()) +
                           ", got " + std::to_string(inputs.count));
  }
  if (outputs.count > family.max_outputs()) {
    return InvalidArgument("num_outputs: expected at most " + std::to_string(family.max_outputs()) +
                           ", got " + std::to_string(outputs.count));
  }
  out->inputs.assign(family.max_inputs(), TensorSignature{});
  out->outputs.assign(family.max_outputs(), TensorSignature{});
  for (size_t i = 0; i < inputs.count; ++i) {
    ATTNRT_RETURN_IF_ERROR(
        ReadTensor("input", family.input_name(i), inputs.at(i), require_data, &out->inputs[i]));
  }
  for (size_t i = 0; i < outputs.count; ++i) {
    ATTNRT_RETURN_IF_ERROR(
        ReadTensor("output", family.output_name(i), outputs.at(i), require_data, &out->outputs[i]));
  }
  return Status::Ok();
}

Status OpImpl::Prepare(const TensorList& inputs, const TensorList& outputs, Signature* signature,
                       std::unique_ptr<Problem>* problem) const {
  ATTNRT_RETURN_IF_ERROR(ReadSignature(*family_, inputs, outputs, false, signature));
  return family_->Prepare(inputs, outputs, problem);
}

Status OpImpl::Plan(const TensorList& inputs, const TensorList& outputs,
                    std::shared_ptr<const PlanImpl>* out) {
  Signature signature;
  ATTNRT_RETURN_IF_ERROR(ReadSignature(*family_, inputs, outputs, false, &signature));
  const std::vector<int64_t> key = signature.Key();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto cached = Lookup(key)) {
      ++hits_;
      *out = std::move(cached);
      return Status::Ok();
    }
  }
  // A growing cache: one plan per capacity, cached under the signature at capacity.
  std::vector<DimRef> growing = family_->GrowingDims(inputs, outputs);
  const int64_t capacity = GrowthCapacity(signature, growing);
  std::vector<int64_t> growth_key;
  std::shared_ptr<const PlanImpl> grown;
  if (capacity > 0) {
    growth_key = WithExtent(signature, growing, capacity).Key();
    growth_key.push_back(-2);  // no signature's key: those end with their last tensor
    std::lock_guard<std::mutex> lock(mutex_);
    grown = Lookup(growth_key);
  }
  auto plan = std::make_shared<PlanImpl>();
  ATTNRT_RETURN_IF_ERROR(family_->Prepare(inputs, outputs, &plan->problem));
  plan->runtime = runtime_;
  plan->family = family_;
  plan->signature = std::move(signature);
  plan->description = Describe(*family_, plan->signature);
  const std::string op_name = attnrt_op_kind_name(family_->kind());
  if (plan->problem->computed_by_core()) {
    if (runtime_->config().debug) {
      runtime_->Log(ATTNRT_LOG_DEBUG, "plan " + op_name + " " + plan->description + " kernel=core");
    }
    ++misses_;
    *out = Insert(key, std::move(plan));
    return Status::Ok();
  }

  const auto candidates =
      runtime_->registry().Evaluate(runtime_->config(), family_->kind(), *plan->problem);
  for (const auto& candidate : candidates) {
    if (candidate.status == ATTNRT_CANDIDATE_SELECTED) plan->kernel = candidate.kernel;
  }
  if (plan->kernel == nullptr) {
    return {RejectionCode(candidates), "no kernel accepts " + op_name + " " + plan->description +
                                           " — " + DescribeRejections(candidates)};
  }
  // The plan of this capacity serves when it has the kernel a new plan would have and its
  // workspace suffices; else this signature gets a plan of its own.
  if (grown != nullptr) {
    if (grown->kernel == plan->kernel && grown->Covers(*plan->problem).ok()) {
      ++hits_;
      *out = std::move(grown);
      return Status::Ok();
    }
    growing.clear();
  }
  const std::string failure = CallPlugin([&] {
    plan->workspace_size = plan->kernel->desc->workspace_size(
        plan->kernel->plugin->context, plan->problem->abi_for_kernel(*plan->kernel));
  });
  if (!failure.empty()) {
    return Internal("kernel " + plan->kernel->name + ": workspace_size() " + failure);
  }
  // Sized for the capacity when the kernel accepts the problem at capacity.
  std::unique_ptr<Problem> capacity_problem;
  size_t capacity_workspace = 0;
  const bool at_capacity =
      capacity > 0 && !growing.empty() &&
      PrepareWithExtent(*family_, inputs, outputs, growing, capacity, &capacity_problem).ok() &&
      KernelFits(*plan->kernel, *capacity_problem, std::numeric_limits<size_t>::max(),
                 &capacity_workspace)
          .ok();
  if (at_capacity) {
    plan->growing = growing;
    plan->capacity = capacity;
    plan->capacity_signature = WithExtent(plan->signature, growing, capacity);
    plan->workspace_size = std::max(plan->workspace_size, capacity_workspace);
    plan->description += " (" + GrowthText(*family_, growing, capacity) + ")";
  }
  if (runtime_->config().debug) {
    runtime_->Log(ATTNRT_LOG_DEBUG, "plan " + op_name + " " + plan->description +
                                        " kernel=" + plan->kernel->name +
                                        " workspace=" + std::to_string(plan->workspace_size));
  }
  ++misses_;
  std::shared_ptr<const PlanImpl> cached = Insert(at_capacity ? growth_key : key, plan);
  // Another thread's plan of this capacity, made for other lengths, serves only as above.
  if (at_capacity && cached != plan &&
      !(cached->kernel == plan->kernel && cached->Covers(*plan->problem).ok())) {
    cached = std::move(plan);
  }
  *out = std::move(cached);
  return Status::Ok();
}

std::shared_ptr<const PlanImpl> OpImpl::Lookup(const Key& key) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return nullptr;
  recency_.splice(recency_.begin(), recency_, it->second.recency);
  return it->second.plan;
}

std::shared_ptr<const PlanImpl> OpImpl::Insert(const Key& key,
                                               std::shared_ptr<const PlanImpl> plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) return plan;
  // Another thread may have planned the same signature meanwhile; both plans are equivalent.
  if (auto cached = Lookup(key)) return cached;
  const auto it = cache_.emplace(key, CacheEntry{plan, {}}).first;
  recency_.push_front(&it->first);
  it->second.recency = recency_.begin();
  while (cache_.size() > capacity_) {
    const auto victim = cache_.find(*recency_.back());
    recency_.pop_back();
    cache_.erase(victim);
    ++evictions_;
  }
  return plan;
}

attnrt_plan_cache_info OpImpl::CacheInfo() const {
  attnrt_plan_cache_info info{};
  info.struct_size = sizeof(info);
  std::lock_guard<std::mutex> lock(mutex_);
  info.hits = hits_.load();
  info.misses = misses_.load();
  info.evictions = evictions_.load();
  info.size = cache_.size();
  info.capacity = capacity_;
  return info;
}

Status OpImpl::Explain(const TensorList& inputs, const TensorList& outputs,
                       std::vector<Candidate>* out) const {
  Signature signature;
  std::unique_ptr<Problem> problem;
  ATTNRT_RETURN_IF_ERROR(Prepare(inputs, outputs, &signature, &problem));
  *out = runtime_->registry().Evaluate(runtime_->config(), family_->kind(), *problem);
  return Status::Ok();
}

void* WorkspaceLease::Borrow(size_t size, size_t alignment) {
  {
    std::lock_guard<std::mutex> lock(pool_.mutex);
    if (!pool_.spare.empty()) {
      buffer_ = std::move(pool_.spare.back());
      pool_.spare.pop_back();
      return buffer_.get();
    }
  }
  // Rounded up to the alignment (aligned_alloc's rule); a size within one alignment of SIZE_MAX
  // would wrap to a tiny buffer, so it is refused like any allocation that fails.
  const size_t padding = (alignment - size % alignment) % alignment;
  if (size <= SIZE_MAX - padding) buffer_.reset(std::aligned_alloc(alignment, size + padding));
  return buffer_.get();
}

WorkspaceLease::~WorkspaceLease() {
  if (!buffer_) return;
  std::lock_guard<std::mutex> lock(pool_.mutex);
  try {
    pool_.spare.push_back(std::move(buffer_));
  } catch (...) {
    // Not kept: freed with the lease.
  }
}

Status PlanImpl::Run(const TensorList& caller_inputs, const TensorList& outputs, void* workspace,
                     size_t workspace_size_given, void* stream) const {
  Signature given;
  ATTNRT_RETURN_IF_ERROR(ReadSignature(*family, caller_inputs, outputs, true, &given));
  // A plan for a growing cache runs other growing extents up to its capacity: the tensors are
  // compared at capacity, then validated and checked against the kernel and the workspace.
  const bool grown =
      !growing.empty() && !(given.inputs == signature.inputs && given.outputs == signature.outputs);
  if (grown) {
    for (const auto& d : growing) {
      const TensorSignature* t = DimTensor(given, d);
      if (t == nullptr || t->shape[d.dim] <= capacity) continue;
      return PlanMismatch(std::string(d.output ? "output '" : "input '") +
                          (d.output ? family->output_name(d.index) : family->input_name(d.index)) +
                          "': the plan runs dimension " + std::to_string(d.dim) + " up to " +
                          std::to_string(capacity) + ", got " + TensorText(*t) +
                          "; make a plan for these tensors");
    }
  }
  const Signature at_capacity = grown ? WithExtent(given, growing, capacity) : Signature{};
  const Signature& planned = grown ? capacity_signature : signature;
  const Signature& actual = grown ? at_capacity : given;
  auto compare = [&](const char* role, const char* name, const TensorSignature& planned_tensor,
                     const TensorSignature& actual_tensor) -> Status {
    if (planned_tensor == actual_tensor) return Status::Ok();
    return PlanMismatch(std::string(role) + " '" + name + "': the plan was made for " +
                        TensorText(planned_tensor) + ", got " + TensorText(actual_tensor) +
                        "; make a plan for these tensors");
  };
  for (size_t i = 0; i < actual.inputs.size(); ++i) {
    ATTNRT_RETURN_IF_ERROR(
        compare("input", family->input_name(i), planned.inputs[i], actual.inputs[i]));
  }
  for (size_t i = 0; i < actual.outputs.size(); ++i) {
    ATTNRT_RETURN_IF_ERROR(
        compare("output", family->output_name(i), planned.outputs[i], actual.outputs[i]));
  }
  std::unique_ptr<Problem> grown_problem;
  if (grown) {
    ATTNRT_RETURN_IF_ERROR(family->Prepare(caller_inputs, outputs, &grown_problem));
    ATTNRT_RETURN_IF_ERROR(Covers(*grown_problem));
  }
  // The tensors have the plan's shapes and strides (so the host integer inputs span only what
  // their shapes say); from here on those inputs are this run's copies: what is validated is what
  // the kernel reads, whatever the caller's arrays become meanwhile.
  HostSnapshot snapshot;
  ATTNRT_RETURN_IF_ERROR(snapshot.Take(*family, caller_inputs, outputs));
  const TensorList inputs = snapshot.inputs();
  const Problem& run_problem = grown ? *grown_problem : *problem;
  // A run given no workspace borrows one of the plan's own, allocated at the first such run and
  // kept for the next (as many as run at once): a decode loop allocates and faults in its scratch
  // memory once, not every step.
  WorkspaceLease lease(spare_workspaces_);
  if (workspace == nullptr) {
    if (workspace_size > 0) {
      workspace = lease.Borrow(workspace_size, kWorkspaceAlignment);
      if (workspace == nullptr) {
        return {ATTNRT_ERROR_OUT_OF_MEMORY,
                "workspace: cannot allocate " + std::to_string(workspace_size) +
                    " bytes (the size kernel " + kernel_name() + " asked for)"};
      }
    }
    workspace_size_given = workspace_size;
  } else {
    if (workspace_size_given < workspace_size) {
      return InvalidArgument("workspace_size: expected at least " + std::to_string(workspace_size) +
                             " bytes, got " + std::to_string(workspace_size_given));
    }
    if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
      return InvalidArgument("workspace: expected an address aligned to " +
                             std::to_string(kWorkspaceAlignment) + " bytes");
    }
  }
  if (kernel == nullptr) return problem->RunInCore(inputs, outputs, runtime->pool().num_threads());
  return run_problem.Run(*kernel, inputs, outputs, workspace, workspace_size_given, stream);
}

Status PlanImpl::Covers(const Problem& other) const {
  size_t needed = 0;
  return KernelFits(*kernel, other, workspace_size, &needed);
}

const std::string& PlanImpl::kernel_name() const {
  static const std::string kCore = "core";
  return kernel != nullptr ? kernel->name : kCore;
}

}  // namespace attnrt::core
