#include "paged_session.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "errors.h"

namespace plugin_inspect {

namespace {
constexpr std::size_t kInputs = ATTNRT_PAGED_GQA_NUM_INPUTS;
}  // namespace

struct PagedSession::Binding {
  std::vector<attnrt_tensor> views;  // stable storage for the descriptors
  std::vector<const attnrt_tensor*> inputs;
  std::vector<const attnrt_tensor*> outputs;
};

PagedSession::PagedSession(attnrt_runtime* runtime, const attnrt_gqa_attributes& attributes,
                           int32_t block_size, int32_t kv_layout, const GqaConfig& config,
                           bool allocate, int32_t p_precision)
    : block_size_(block_size),
      kv_layout_(kv_layout),
      batch_(config.batch),
      kv_heads_(attributes.kv_num_heads) {
  attnrt_paged_gqa_attributes paged;
  attnrt_paged_gqa_attributes_init(&paged);
  paged.gqa = attributes;
  paged.block_size = block_size;
  paged.kv_layout = kv_layout;
  paged.p_precision = p_precision;
  attnrt_op* op = nullptr;
  check(attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &paged, &op));
  op_.reset(op);
  const int64_t capacity = std::max<int64_t>(config.past_len, config.total_len);
  slots_ = std::max<int64_t>(1, (capacity + block_size - 1) / block_size);
  const int64_t num_blocks = batch_ * slots_;
  attnrt_block_pool_options options{sizeof(attnrt_block_pool_options), num_blocks, block_size};
  check(attnrt_block_pool_create(&options, &pool_));
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t id = -1;
    check(attnrt_block_pool_add_sequence(pool_, &id));
    sequences_.push_back(id);
  }
  const bool bnsh = kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const std::vector<int64_t> pool_shape{num_blocks, bnsh ? kv_heads_ : block_size,
                                        bnsh ? block_size : kv_heads_, cache_head_size(config)};
  key_pool_ = std::make_unique<HostTensor>(config.cache_dtype, pool_shape, allocate, "key_cache");
  value_pool_ =
      std::make_unique<HostTensor>(config.cache_dtype, pool_shape, allocate, "value_cache");
  table_ = std::make_unique<HostTensor>(kInt32, std::vector<int64_t>{batch_, slots_}, allocate,
                                        "block_table");
  if (allocate) {
    std::fill(table_->as<int32_t>(), table_->as<int32_t>() + batch_ * slots_, -1);
  }
}

PagedSession::~PagedSession() { attnrt_block_pool_destroy(pool_); }

PagedSession::Binding PagedSession::bind(const GqaTensors& tensors) {
  Binding binding;
  binding.views.resize(kInputs + ATTNRT_PAGED_GQA_NUM_OUTPUTS);
  binding.inputs.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, nullptr);
  const auto set = [&](size_t slot, const HostTensor& t) {
    binding.views[slot] = t.view();
    return &binding.views[slot];
  };
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    if (i == ATTNRT_GQA_INPUT_PAST_KEY || i == ATTNRT_GQA_INPUT_PAST_VALUE) continue;
    if (tensors.inputs[i]) binding.inputs[i] = set(i, *tensors.inputs[i]);
  }
  binding.inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] =
      set(ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, *key_pool_);
  binding.inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
      set(ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, *value_pool_);
  binding.inputs[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] =
      set(ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE, *table_);
  binding.outputs.push_back(
      set(kInputs + ATTNRT_PAGED_GQA_OUTPUT_OUTPUT, *tensors.outputs[ATTNRT_GQA_OUTPUT_OUTPUT]));
  if (tensors.outputs[ATTNRT_GQA_OUTPUT_OUTPUT_QK]) {
    binding.outputs.push_back(set(kInputs + ATTNRT_PAGED_GQA_OUTPUT_OUTPUT_QK,
                                  *tensors.outputs[ATTNRT_GQA_OUTPUT_OUTPUT_QK]));
  }
  return binding;
}

StepResult PagedSession::step(const GqaTensors& tensors) {
  const auto* seqlens = tensors.inputs[ATTNRT_GQA_INPUT_SEQLENS_K]->as<int32_t>();
  HostTensor& present_key = *tensors.outputs[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
  HostTensor& present_value = *tensors.outputs[ATTNRT_GQA_OUTPUT_PRESENT_VALUE];
  const int64_t present_rows = present_key.shape()[2];
  const std::size_t row_bytes =
      present_key.nbytes() / static_cast<std::size_t>(batch_ * kv_heads_ * present_rows);
  const std::size_t block_bytes = static_cast<std::size_t>(block_size_ * kv_heads_) * row_bytes;

  // The new tokens of each sequence, then this step's table.
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t length = 0;
    check(attnrt_block_pool_sequence_info(pool_, sequences_[b], &length, nullptr));
    const int64_t added = std::max<int64_t>(0, seqlens[b] + 1 - length);
    attnrt_block_copy copy{sizeof(attnrt_block_copy), 0, 0, 0};
    check(attnrt_block_pool_append(pool_, sequences_[b], added, &copy));
    // Copy-on-write (only after a fork, which this workload never makes): the whole block.
    if (copy.num_tokens > 0) {
      for (HostTensor* pool : {key_pool_.get(), value_pool_.get()}) {
        auto* base = pool->as<unsigned char>();
        std::memcpy(base + copy.dst_block * block_bytes, base + copy.src_block * block_bytes,
                    block_bytes);
      }
    }
  }
  check(attnrt_block_pool_block_table(pool_, sequences_.data(), sequences_.size(), slots_,
                                      table_->as<int32_t>(), nullptr));

  const Binding binding = bind(tensors);
  attnrt_plan* raw_plan = nullptr;
  check(attnrt_op_plan(op_.get(), binding.inputs.data(), binding.inputs.size(),
                       binding.outputs.data(), binding.outputs.size(), &raw_plan));
  const PlanPtr plan(raw_plan);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  check(attnrt_plan_get_info(plan.get(), &info));
  const std::size_t alignment = std::max<std::size_t>(info.workspace_alignment, 64);
  if (workspace_storage_.size() < info.workspace_size + alignment) {
    workspace_storage_.assign(info.workspace_size + alignment, 0);
  }
  const auto base = reinterpret_cast<uintptr_t>(workspace_storage_.data());
  void* workspace = reinterpret_cast<void*>((base + alignment - 1) / alignment * alignment);

  StepResult result;
  result.kernel = info.kernel ? info.kernel : "";
  const auto start = std::chrono::steady_clock::now();
  check(attnrt_plan_run(plan.get(), binding.inputs.data(), binding.inputs.size(),
                        binding.outputs.data(), binding.outputs.size(), workspace,
                        info.workspace_size, nullptr));
  const auto stop = std::chrono::steady_clock::now();
  result.ms = std::chrono::duration<double, std::milli>(stop - start).count();

  // Rows [0, T_b) through the table into the contiguous present buffers.
  const auto* table = table_->as<int32_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < kv_heads_; ++h) {
      for (int64_t j = 0; j <= seqlens[b] && j < present_rows; ++j) {
        const int64_t block = table[b * slots_ + j / block_size_];
        const int64_t row = kv_layout_ == ATTNRT_PAGED_KV_LAYOUT_BNSH
                                ? (block * kv_heads_ + h) * block_size_ + j % block_size_
                                : (block * block_size_ + j % block_size_) * kv_heads_ + h;
        const std::size_t from = static_cast<std::size_t>(row) * row_bytes;
        const std::size_t to =
            static_cast<std::size_t>((b * kv_heads_ + h) * present_rows + j) * row_bytes;
        std::memcpy(present_key.as<unsigned char>() + to, key_pool_->as<unsigned char>() + from,
                    row_bytes);
        std::memcpy(present_value.as<unsigned char>() + to, value_pool_->as<unsigned char>() + from,
                    row_bytes);
      }
    }
  }
  return result;
}

ExplanationPtr PagedSession::explain(const GqaTensors& tensors, attnrt_device device,
                                     nlohmann::ordered_json* tensors_json) {
  Binding binding = bind(tensors);
  for (size_t i = 0; i < binding.views.size(); ++i) {
    if (i == ATTNRT_PAGED_GQA_INPUT_SEQLENS_K ||
        i == ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH ||
        i == ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE) {
      continue;
    }
    binding.views[i].device = device;
  }
  if (tensors_json) {
    append_tensors_json(*tensors_json, binding.inputs.data(), binding.inputs.size(), [](size_t i) {
      if (i == ATTNRT_PAGED_GQA_INPUT_KEY_CACHE) return "key_cache";
      if (i == ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE) return "value_cache";
      if (i == ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE) return "block_table";
      return gqa_input_name(static_cast<int>(i));
    });
    append_tensors_json(*tensors_json, binding.outputs.data(), binding.outputs.size(),
                        [](size_t o) { return o == 0 ? "output" : "output_qk"; });
  }
  attnrt_explanation* explanation = nullptr;
  check(attnrt_op_explain(op_.get(), binding.inputs.data(), binding.inputs.size(),
                          binding.outputs.data(), binding.outputs.size(), &explanation));
  return ExplanationPtr(explanation);
}

PlanCacheStats PagedSession::plan_cache_stats() const {
  PlanCacheStats stats;
  check(attnrt_op_plan_cache_stats(op_.get(), &stats.hits, &stats.misses));
  return stats;
}

attnrt_block_pool_stats PagedSession::pool_stats() const {
  attnrt_block_pool_stats stats{};
  stats.struct_size = sizeof(stats);
  check(attnrt_block_pool_get_stats(pool_, &stats));
  return stats;
}

}  // namespace plugin_inspect
