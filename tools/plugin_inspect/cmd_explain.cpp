// plugin-inspect explain: every kernel registered for a problem of the chosen op (--op gqa,
// paged_gqa, sparse_mla or paged_gqa_varlen), in rank order, with "selected", "eligible" or the
// reason it declines. Only descriptors are built (data NULL).
#include <algorithm>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "gqa_config.h"
#include "gqa_session.h"
#include "model_presets.h"
#include "paged_session.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

std::string usage() {
  return "usage: plugin-inspect explain [--op gqa|paged_gqa|sparse_mla|paged_gqa_varlen] "
         "[options]\n"
         "       plugin-inspect explain [--op gqa] [--model NAME] [--batch B] [--seq-len S]\n"
         "           [--past-len P] [--total-len T] [--device cpu|cuda] [attribute flags]\n"
         "       plugin-inspect explain --op paged_gqa [--block-size BS] [--paged-layout "
         "bsnh|bnsh]\n"
         "           [--p-precision exact|input] [the gqa options]\n"
         "       plugin-inspect explain --op sparse_mla [--scenario csa|hca|swa] [--quant-mode "
         "1|2|3]\n"
         "           [the sparse MLA options below] [--device cpu|cuda]\n"
         "       plugin-inspect explain --op paged_gqa_varlen [--q-lens 1,1,37,1] [--seq-lens "
         "L,...]\n"
         "           [--block-size BS] [the packed-batch options below] [--device cpu|cuda]\n"
         "\n"
         "Ranks every kernel of the op for these shapes without running anything.\n"
         "gqa, paged_gqa: --model (default " +
         std::string(kDefaultModel) +
         ", as for run) gives the head counts, head size,\n"
         "window, softcap and rotary; explicit flags override. Default T: P + S; with\n"
         "--shared-buffer (P is the buffer capacity) S for a prompt, P for decode. Rotary caches\n"
         "have max(T, P) rows. paged_gqa ranks the paged kernels for the same call over block\n"
         "pools of --block-size tokens (--paged BS is short for --op paged_gqa --block-size BS)\n"
         "holding max(T, P) tokens per sequence. sparse_mla: MixedQuantSparseFlashMla shapes\n"
         "(see its options). paged_gqa_varlen: one packed batch of sequences with --q-lens new\n"
         "query rows and --seq-lens context lengths each (prefill chunks and decodes mixed).\n"
         "--device describes the tensors (not the host-read lengths and\n"
         "tables) as living on that device, for every op. An option of another op is an error.";
}

po::options_description device_options() {
  po::options_description desc("Placement (every op)");
  desc.add_options()  //
      ("device", po::value<std::string>()->default_value("cpu"),
       "device of the tensors: cpu or cuda (host-read inputs such as seqlens_k stay on the host)");
  return desc;
}

po::options_description gqa_problem_options() {
  po::options_description desc("GroupQueryAttention problem (--op gqa, paged_gqa)");
  desc.add_options()  //
      ("model", po::value<std::string>(),
       ("model preset for heads, head size, window, softcap (default " +
        std::string(kDefaultModel) + "; see plugin-inspect --help)")
           .c_str())                                                                            //
      ("batch", po::value<int64_t>()->default_value(1), "batch size B")                         //
      ("seq-len", po::value<int64_t>()->default_value(1), "new query tokens S")                 //
      ("past-len", po::value<int64_t>()->default_value(0), "past buffer rows P (0 = no past)")  //
      ("total-len", po::value<int64_t>(), "total_sequence_length T");
  return desc;
}

std::vector<OptionGroup> explain_groups() {
  return {{gqa_problem_options(), {OpFamily::kGqa, OpFamily::kPagedGqa}},
          {paged_cache_options(/*shorthand=*/true), {OpFamily::kPagedGqa}},
          {gqa_flag_options(), {OpFamily::kGqa, OpFamily::kPagedGqa}},
          {sparse_mla_options(/*run=*/false), {OpFamily::kSparseMla}},
          {varlen_options(/*run=*/false), {OpFamily::kPagedGqaVarlen}},
          {device_options(), {}},
          {common_options(), {}}};
}

const char* quant_name(int32_t type) {
  switch (type) {
    case ATTNRT_GQA_QUANT_NONE:
      return "none";
    case ATTNRT_GQA_QUANT_PER_TENSOR:
      return "per_tensor";
    case ATTNRT_GQA_QUANT_PER_CHANNEL:
      return "per_channel";
    case ATTNRT_GQA_QUANT_PER_BLOCK_32:
      return "per_block_32";
  }
  return "invalid";
}

// The problem of a gqa/paged_gqa explain as JSON: sizes, dtypes, attributes, (paged) block size
// and layout; the tensors are added by the session.
nlohmann::ordered_json problem_json(const GqaConfig& config, const std::string& model, OpFamily op,
                                    const PagedFlags& paged) {
  const attnrt_gqa_attributes& a = config.attributes;
  nlohmann::ordered_json problem;
  problem["description"] = describe_config(config);
  problem["model"] = model;
  problem["batch"] = config.batch;
  problem["seq_len"] = config.seq_len;
  problem["past_len"] = config.past_len;
  problem["total_len"] = config.total_len;
  problem["num_heads"] = a.num_heads;
  problem["kv_num_heads"] = a.kv_num_heads;
  problem["head_size"] = config.head_size;
  problem["dtype"] = dtype_name(config.dtype);
  problem["cache_dtype"] = dtype_name(config.cache_dtype);
  problem["attributes"] = {{"causal", a.causal},
                           {"local_window_size", a.local_window_size},
                           {"softcap", a.softcap},
                           {"scale", a.scale},
                           {"do_rotary", a.do_rotary},
                           {"rotary_interleaved", a.rotary_interleaved},
                           {"smooth_softmax", a.smooth_softmax},
                           {"qk_output", a.qk_output},
                           {"k_quant_type", quant_name(a.k_quant_type)},
                           {"v_quant_type", quant_name(a.v_quant_type)},
                           {"kv_cache_bit_width", a.kv_cache_bit_width}};
  if (op == OpFamily::kPagedGqa) {
    problem["block_size"] = paged.block_size;
    problem["kv_layout"] = paged.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh";
    problem["p_precision"] = paged.p_precision == ATTNRT_P_PRECISION_INPUT ? "input" : "exact";
  }
  problem["tensors"] = nlohmann::ordered_json::array();
  return problem;
}

}  // namespace

attnrt_device device_from_flags(const po::variables_map& vm) {
  const std::string name = vm["device"].as<std::string>();
  if (name == "cpu") return {ATTNRT_DEVICE_CPU, 0};
  if (name == "cuda") return {ATTNRT_DEVICE_CUDA, 0};
  throw UsageError("unknown --device '" + name + "' (known: cpu, cuda)");
}

nlohmann::ordered_json explanation_json(const attnrt_explanation* explanation) {
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  size_t count = 0;
  check(attnrt_explanation_count(explanation, &count));
  for (size_t i = 0; i < count; ++i) {
    attnrt_candidate candidate{};
    candidate.struct_size = sizeof(candidate);
    check(attnrt_explanation_candidate(explanation, i, &candidate));
    // A reason is a plugin's text: what is not UTF-8 in it is escaped, in the JSON and the text.
    candidates.push_back({{"kernel", printable(candidate.kernel ? candidate.kernel : "")},
                          {"priority", candidate.priority},
                          {"status", attnrt_candidate_status_name(candidate.status)},
                          {"reason", printable(candidate.reason ? candidate.reason : "")}});
  }
  return candidates;
}

void print_explanation(const nlohmann::ordered_json& result, const std::string& headline) {
  std::cout << headline << "\n\n";
  TextTable table({"rank", "kernel", "priority", "status", "reason"});
  int rank = 0;
  for (const auto& candidate : result["candidates"]) {
    table.add_row({std::to_string(++rank), candidate["kernel"].get<std::string>(),
                   std::to_string(candidate["priority"].get<int>()),
                   candidate["status"].get<std::string>(), candidate["reason"].get<std::string>()});
  }
  table.print(std::cout);
}

int cmd_explain(const Args& args) {
  const OpFamily op = requested_op(args);
  po::variables_map vm;
  if (!parse_command_line(args, explain_groups(), op, usage(), vm)) return 0;
  if (op == OpFamily::kSparseMla) return explain_sparse_mla(vm);
  if (op == OpFamily::kPagedGqaVarlen) return explain_varlen(vm);
  const CommonFlags common = read_common_flags(vm);
  const attnrt_device device = device_from_flags(vm);
  const PagedFlags paged = op == OpFamily::kPagedGqa ? read_paged_flags(vm) : PagedFlags{};
  const std::string model =
      vm.count("model") ? vm["model"].as<std::string>() : std::string(kDefaultModel);
  GqaConfig config = config_from_flags(read_gqa_flags(vm), &find_model_preset(model));
  config.batch = vm["batch"].as<int64_t>();
  config.seq_len = vm["seq-len"].as<int64_t>();
  config.past_len = vm["past-len"].as<int64_t>();
  if (config.past_len < 0) throw UsageError("--past-len must be >= 0");
  const bool quantized = config.attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE;
  config.with_past = config.past_len > 0 || config.shared_buffer || quantized;
  if (vm.count("total-len")) {
    config.total_len = vm["total-len"].as<int64_t>();
  } else if (config.shared_buffer) {
    config.total_len = config.seq_len > 1 ? config.seq_len : config.past_len;
  } else {
    config.total_len = config.past_len + config.seq_len;
  }
  if (config.attributes.do_rotary == 1) config.rotary_cache_len = present_len(config);

  const GqaTensors tensors = make_gqa_tensors(config, /*allocate=*/false);
  const RuntimePtr runtime = make_runtime(common.runtime);
  nlohmann::ordered_json result = runtime_json(runtime.get());
  result["op"] = op_name(op);
  result["device"] = device_name(device.device_type);
  result["problem"] = problem_json(config, model, op, paged);
  ExplanationPtr explanation;
  if (op == OpFamily::kPagedGqa) {
    PagedSession session(runtime.get(), config.attributes, paged.block_size, paged.kv_layout,
                         config, /*allocate=*/false, paged.p_precision);
    explanation = session.explain(tensors, device, &result["problem"]["tensors"]);
  } else {
    GqaSession session(runtime.get(), config.attributes);
    explanation = session.explain(tensors, device, &result["problem"]["tensors"]);
  }
  result["candidates"] = explanation_json(explanation.get());
  if (common.json) {
    std::cout << dump_json(result) << "\n";
    return 0;
  }
  std::string headline = std::string(op_name(op)) + ": " + describe_config(config);
  if (op == OpFamily::kPagedGqa) {
    headline += ", block_size " + std::to_string(paged.block_size) + " " +
                (paged.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "BNSH" : "BSNH") +
                ", p_precision " +
                (paged.p_precision == ATTNRT_P_PRECISION_INPUT ? "input" : "exact");
  }
  headline += ", model " + model + ", device " + device_name(device.device_type);
  print_explanation(result, headline);
  return 0;
}

}  // namespace plugin_inspect
