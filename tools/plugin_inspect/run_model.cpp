// plugin-inspect run --model: a first prompt that fills a shared past/present KV cache, then
// decode steps of one token through one reused plan, each checked against the scalar reference.
#include <algorithm>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt_handles.h"
#include "errors.h"
#include "gqa_config.h"
#include "gqa_session.h"
#include "model_presets.h"
#include "paged_session.h"
#include "run_common.h"
#include "sizes.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

// Beyond this context the scalar reference prompt (~N·context²·H·2 multiply-adds) is too slow
// to run by default.
constexpr int64_t kMaxCheckedPromptContext = 1024;

struct PhaseResult {
  std::string phase;
  std::string kernel;
  double ms_per_step = 0;
  double tokens_per_s = 0;
  bool checked = false;
  OutputErrors errors;
  std::string reference_kernel;
  std::string note;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// Runs `tensors` on the main session and, when `reference` is given, the same inputs (and a copy
// of the cache as it was before the step) on the reference session for the kernel that ran;
// returns the main result.
template <class Session>
StepResult checked_step(Session& session, ReferenceSessions* reference, GqaTensors& tensors,
                        OutputErrors& errors, std::string& reference_kernel) {
  std::optional<GqaTensors> reference_tensors;
  if (reference) reference_tensors = reference_copy(tensors);
  const StepResult result = session.step(tensors);
  if (reference) {
    reference_kernel = reference->for_kernel(result.kernel).step(*reference_tensors).kernel;
    errors.accumulate(tensors, *reference_tensors);
  }
  return result;
}

nlohmann::ordered_json phase_json(const PhaseResult& phase) {
  nlohmann::ordered_json json;
  json["phase"] = phase.phase;
  json["kernel"] = phase.kernel;
  json["ms_per_step"] = phase.ms_per_step;
  json["tokens_per_s"] = phase.tokens_per_s;
  json["max_abs_error"] = phase.checked ? phase.errors.to_json() : nlohmann::ordered_json(nullptr);
  json["checked"] = phase.checked;
  json["reference_kernel"] = phase.reference_kernel;
  return json;
}

// Peak bytes of the run, computed from descriptor-only tensors before anything is allocated: the
// prompt's tensors (the cache, shared with every decode step, among them) live throughout; on top
// of them either the prompt's reference outputs (a copy of the cache) or the largest decode step
// (the last: attention_bias and output_qk grow with T) with its reference outputs, plus the
// per-step timings. Throws UsageError naming the flags when it overflows 64 bits or exceeds the
// machine's physical memory; checks context + steps against the int32 total_sequence_length.
void check_run_size(const RunOptions& options, const GqaConfig& prompt, bool check_prompt) {
  const GqaTensors prompt_tensors = make_gqa_tensors(prompt, /*allocate=*/false);
  const std::optional<uint64_t> persistent = tensors_bytes(prompt_tensors);
  std::optional<uint64_t> peak = persistent;
  if (check_prompt) {
    peak = checked_add(persistent, tensors_bytes(prompt_tensors, nullptr, /*outputs_only=*/true));
  }
  if (options.steps > 0) {
    GqaConfig last = prompt;
    last.seq_len = 1;
    last.total_len = prompt.past_len;  // context + steps
    const GqaTensors step = make_gqa_tensors(last, /*allocate=*/false, &prompt_tensors);
    std::optional<uint64_t> decode = checked_add(persistent, tensors_bytes(step, &prompt_tensors));
    if (options.check) {
      decode = checked_add(decode, tensors_bytes(step, nullptr, /*outputs_only=*/true));
    }
    decode = checked_add(decode, checked_mul(static_cast<uint64_t>(options.steps), 8));
    peak = peak && decode ? std::max(*peak, *decode) : std::optional<uint64_t>();
  }
  const std::optional<uint64_t> cache =
      checked_mul(prompt_tensors.inputs[ATTNRT_GQA_INPUT_PAST_KEY]->checked_nbytes(), uint64_t{2});
  // --paged: the block pools hold the same rows again (the contiguous buffer is the check's view).
  if (options.paged_block_size) peak = checked_add(peak, cache);
  const std::string flags = "--context " + std::to_string(options.context) + " with --steps " +
                            std::to_string(options.steps) + " and --batch " +
                            std::to_string(options.batch);
  if (!fits_in_memory(peak)) {
    throw UsageError(flags + " needs a KV cache of " + format_bytes(cache) + " (" +
                     std::to_string(prompt.past_len) + " rows of key and value) and " +
                     format_bytes(peak) + " in all" +
                     (options.check ? " with the reference check's copies" : "") + memory_note());
  }
  if (prompt.past_len > INT32_MAX) {
    throw UsageError(flags + ": context + steps = " + std::to_string(prompt.past_len) +
                     " exceeds the int32 total_sequence_length limit " + std::to_string(INT32_MAX));
  }
}

}  // namespace

int run_model(const RunOptions& options) {
  const ModelPreset& preset = find_model_preset(options.model.value_or(std::string(kDefaultModel)));
  GqaConfig prompt = config_from_flags(options.gqa, &preset);
  const double theta = options.gqa.rope_theta.value_or(preset.rope_theta);
  const int64_t context = options.context, capacity = options.context + options.steps;
  prompt.batch = options.batch;
  prompt.seq_len = context;
  prompt.total_len = context;
  prompt.past_len = capacity;
  prompt.with_past = true;
  prompt.shared_buffer = true;
  if (prompt.attributes.do_rotary == 1) prompt.rotary_cache_len = capacity;
  const double tolerance = tolerance_for(options, prompt.dtype);
  const bool check_prompt =
      options.check && (context <= kMaxCheckedPromptContext || options.check_prompt);
  check_run_size(options, prompt, check_prompt);

  const RuntimePtr runtime = make_runtime(options.common.runtime);
  GqaSession prompt_op(runtime.get(), prompt.attributes);
  GqaSession decode_op(runtime.get(), prompt.attributes);
  // --paged: one paged op serves the prompt and the decode steps from a block pool.
  std::optional<PagedSession> paged;
  if (options.paged_block_size) {
    paged.emplace(runtime.get(), prompt.attributes, *options.paged_block_size, options.paged_layout,
                  prompt, /*allocate=*/true, options.paged_p_precision);
  }
  std::optional<ReferenceSessions> reference;
  if (options.check) reference.emplace(runtime.get(), options.common.runtime, prompt.attributes);
  std::mt19937_64 rng(options.seed);

  // Prompt: S = T = context, seqlens_k = context - 1, cache rows [0, context) written.
  GqaTensors prompt_tensors = make_gqa_tensors(prompt, /*allocate=*/true);
  fill_parameters(prompt_tensors, prompt, rng);
  fill_random_inputs(prompt_tensors, prompt, rng);
  if (prompt.rotary_cache_len > 0) fill_rotary_caches(prompt_tensors, theta);
  set_lengths(prompt_tensors, static_cast<int32_t>(context - 1), static_cast<int32_t>(context));
  prompt_tensors.inputs[ATTNRT_GQA_INPUT_PAST_KEY]->poison();
  prompt_tensors.inputs[ATTNRT_GQA_INPUT_PAST_VALUE]->poison();
  poison_outputs(prompt_tensors);

  PhaseResult prompt_phase;
  prompt_phase.phase = "prompt";
  prompt_phase.checked = check_prompt;
  if (options.check && !prompt_phase.checked) {
    prompt_phase.note = "prompt check skipped (context > " +
                        std::to_string(kMaxCheckedPromptContext) + "; use --check-prompt)";
  }
  ReferenceSessions* prompt_reference = prompt_phase.checked ? &*reference : nullptr;
  const StepResult prompt_result =
      paged ? checked_step(*paged, prompt_reference, prompt_tensors, prompt_phase.errors,
                           prompt_phase.reference_kernel)
            : checked_step(prompt_op, prompt_reference, prompt_tensors, prompt_phase.errors,
                           prompt_phase.reference_kernel);
  prompt_phase.kernel = prompt_result.kernel;
  prompt_phase.ms_per_step = prompt_result.ms;
  prompt_phase.tokens_per_s =
      static_cast<double>(options.batch * context) / (prompt_result.ms / 1e3);

  // Decode: S = 1, seqlens_k = context + step, T = context + step + 1, same cache buffer.
  PhaseResult decode_phase;
  decode_phase.phase = "decode";
  decode_phase.checked = options.check && options.steps > 0;
  std::vector<double> step_ms;
  for (int64_t step = 0; step < options.steps; ++step) {
    GqaConfig decode = prompt;
    decode.seq_len = 1;
    decode.total_len = context + step + 1;
    GqaTensors tensors = make_gqa_tensors(decode, /*allocate=*/true, &prompt_tensors);
    fill_random_inputs(tensors, decode, rng);
    set_lengths(tensors, static_cast<int32_t>(context + step),
                static_cast<int32_t>(context + step + 1));
    poison_outputs(tensors);
    ReferenceSessions* step_reference = decode_phase.checked ? &*reference : nullptr;
    const StepResult result =
        paged ? checked_step(*paged, step_reference, tensors, decode_phase.errors,
                             decode_phase.reference_kernel)
              : checked_step(decode_op, step_reference, tensors, decode_phase.errors,
                             decode_phase.reference_kernel);
    decode_phase.kernel = result.kernel;
    step_ms.push_back(result.ms);
  }
  decode_phase.ms_per_step = median(step_ms);
  decode_phase.tokens_per_s =
      step_ms.empty() ? 0 : static_cast<double>(options.batch) / (decode_phase.ms_per_step / 1e3);
  // The paged op plans the prompt and the decode shapes: its misses include the prompt's.
  const PlanCacheStats plan_cache =
      paged ? paged->plan_cache_stats() : decode_op.plan_cache_stats();
  attnrt_block_pool_stats pool{};
  if (paged) pool = paged->pool_stats();

  std::vector<PhaseResult> phases{prompt_phase};
  if (options.steps > 0) phases.push_back(decode_phase);
  std::vector<std::string> failures;
  for (const PhaseResult& phase : phases) {
    if (phase.checked && exceeds(phase.errors.worst(), tolerance)) {
      failures.push_back(phase.phase + ": " + phase.errors.to_text());
    }
  }
  const int threads = runtime_threads(runtime.get());
  // The last reference kernel that ran (decode's when it ran, else the prompt's).
  std::string reference_kernel;
  for (const PhaseResult& phase : phases) {
    if (!phase.reference_kernel.empty()) reference_kernel = phase.reference_kernel;
  }
  const bool any_checked = std::any_of(phases.begin(), phases.end(),
                                       [](const PhaseResult& phase) { return phase.checked; });

  if (options.common.json) {
    nlohmann::ordered_json json = runtime_json(runtime.get());
    json["op"] = paged ? "paged_gqa" : "gqa";
    json["model"] = std::string(preset.name);
    json["seed"] = options.seed;
    json["batch"] = options.batch;
    json["context"] = context;
    json["steps"] = options.steps;
    json["phases"] = nlohmann::ordered_json::array();
    for (const PhaseResult& phase : phases) json["phases"].push_back(phase_json(phase));
    json["plan_cache"] = {{"hits", plan_cache.hits}, {"misses", plan_cache.misses}};
    if (paged) {
      json["paged"] = {{"block_size", *options.paged_block_size},
                       {"kv_layout", options.paged_layout == 1 ? "bnsh" : "bsnh"},
                       {"p_precision", options.paged_p_precision == 1 ? "input" : "exact"},
                       {"blocks_used", pool.blocks_used},
                       {"num_blocks", pool.num_blocks},
                       {"internal_fragmentation", pool.internal_fragmentation}};
    }
    json["reference_kernel"] = reference_kernel;
    json["tolerance"] = tolerance;
    json["passed"] = failures.empty();
    json["verdict"] = failures.empty() ? (any_checked ? "passed" : "not checked") : "failed";
    std::cout << dump_json(json) << "\n";
  } else {
    std::cout << "model " << preset.name << " (" << describe_config(prompt) << ", rope theta "
              << theta << ")\n"
              << "batch " << options.batch << ", context " << context << ", steps " << options.steps
              << ", threads " << threads << ", seed " << options.seed << "\n";
    if (paged) {
      std::cout << "paged KV cache: block_size " << *options.paged_block_size << " "
                << (options.paged_layout == 1 ? "BNSH" : "BSNH") << ", " << pool.blocks_used
                << " of " << pool.num_blocks << " blocks in use, internal "
                << "fragmentation " << format_fixed(100.0 * pool.internal_fragmentation, 1)
                << "%; present compared through the block table\n";
    }
    std::cout << "\n";
    TextTable table({"phase", "kernel", "ms/step", "tokens/s", "max abs error vs reference"});
    for (const PhaseResult& phase : phases) {
      table.add_row({phase.phase, phase.kernel, format_fixed(phase.ms_per_step, 3),
                     format_fixed(phase.tokens_per_s, 1),
                     phase.checked ? phase.errors.to_text() : "not checked"});
    }
    table.print(std::cout);
    std::cout << "\n";
    if (!prompt_phase.note.empty()) std::cout << prompt_phase.note << "\n";
    // One line when every checked phase ran the same kernel against the same reference.
    std::vector<const PhaseResult*> checked;
    for (const PhaseResult& phase : phases) {
      if (phase.checked) checked.push_back(&phase);
    }
    const bool same = std::all_of(checked.begin(), checked.end(), [&](const PhaseResult* phase) {
      return phase->kernel == checked.front()->kernel &&
             phase->reference_kernel == checked.front()->reference_kernel;
    });
    for (const PhaseResult* phase : checked) {
      std::cout << "reference" << (same ? "" : " (" + phase->phase + ")") << ": "
                << describe_reference(phase->kernel, phase->reference_kernel) << "\n";
      if (same) break;
    }
    if (options.steps > 0) {
      std::cout << "decode plan cache: " << plan_cache.hits << " hits, " << plan_cache.misses
                << " misses";
      if (prompt.attention_bias || prompt.attributes.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
        std::cout << " (attention_bias/output_qk grow with T, so every step has new shapes)";
      }
      std::cout << "\n";
    } else {
      std::cout << "no decode steps (--steps 0)\n";
    }
    if (!failures.empty()) {
      std::cout << "check FAILED (tolerance " << format_error(tolerance) << ")\n";
    } else if (any_checked) {
      std::cout << "check passed (tolerance " << format_error(tolerance) << ")\n";
    } else {
      std::cout << "check skipped: "
                << (options.check ? "no phase was checked (see the note above)" : "--no-check")
                << "\n";
    }
  }
  for (const std::string& failure : failures) {
    std::cerr << "error: max abs error above tolerance " << format_error(tolerance) << " in "
              << failure << "\n";
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace plugin_inspect
