// plugin-inspect explain: every kernel registered for a GQA problem, in rank order, with
// "selected", "eligible" or the reason it declines. Only descriptors are built (data NULL).
#include <algorithm>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "gqa_config.h"
#include "gqa_session.h"
#include "paged_session.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

constexpr const char* kUsage =
    "usage: plugin-inspect explain --op gqa|paged_gqa [--model NAME] --batch B --seq-len S\n"
    "           --past-len P --num-heads N --kv-num-heads K --head-size H [--total-len T]\n"
    "           [--block-size BS] [attribute flags]\n"
    "\n"
    "Ranks every kernel of the op for these shapes without running anything. --model takes the\n"
    "head counts, head size, window, softcap and rotary from a preset; explicit flags override.\n"
    "Default T: P + S; with --shared-buffer (P is the buffer capacity) S for a prompt, P for\n"
    "decode. Rotary caches have max(T, P) rows. --op paged_gqa ranks the paged kernels for the\n"
    "same call over block pools of --block-size tokens (default 16) holding max(T, P) tokens\n"
    "per sequence.";

po::options_description explain_options() {
  po::options_description desc("Problem");
  desc.add_options()                                                                             //
      ("op", po::value<std::string>()->default_value("gqa"), "op family (gqa, paged_gqa)")       //
      ("block-size", po::value<int32_t>()->default_value(16), "paged_gqa block size (tokens)")   //
      ("model", po::value<std::string>(), "model preset for heads, head size, window, softcap")  //
      ("batch", po::value<int64_t>()->default_value(1), "batch size B")                          //
      ("seq-len", po::value<int64_t>()->default_value(1), "new query tokens S")                  //
      ("past-len", po::value<int64_t>()->default_value(0), "past buffer rows P (0 = no past)")   //
      ("total-len", po::value<int64_t>(), "total_sequence_length T")                             //
      ("device", po::value<std::string>()->default_value("cpu"),
       "device of the tensors: cpu or cuda (seqlens_k and total_sequence_length stay on the host)");
  return desc;
}

nlohmann::ordered_json explanation_json(const attnrt_explanation* explanation,
                                        const std::string& op) {
  nlohmann::ordered_json result;
  result["op"] = op;
  result["candidates"] = nlohmann::ordered_json::array();
  size_t count = 0;
  check(attnrt_explanation_count(explanation, &count));
  for (size_t i = 0; i < count; ++i) {
    attnrt_candidate candidate{};
    candidate.struct_size = sizeof(candidate);
    check(attnrt_explanation_candidate(explanation, i, &candidate));
    result["candidates"].push_back({{"kernel", candidate.kernel ? candidate.kernel : ""},
                                    {"priority", candidate.priority},
                                    {"status", attnrt_candidate_status_name(candidate.status)},
                                    {"reason", candidate.reason ? candidate.reason : ""}});
  }
  return result;
}

}  // namespace

int cmd_explain(const Args& args) {
  if (sparse_mla_requested(args)) return cmd_explain_sparse_mla(args);
  po::options_description desc;
  desc.add(explain_options()).add(gqa_flag_options()).add(common_options());
  po::variables_map vm;
  if (!parse_command_line(args, desc, kUsage, vm)) return 0;
  const CommonFlags common = read_common_flags(vm);
  const std::string op = vm["op"].as<std::string>();
  if (op != "gqa" && op != "paged_gqa") {
    throw UsageError("unknown --op '" + op + "' (known: gqa, paged_gqa, sparse_mla)");
  }
  const int32_t block_size = vm["block-size"].as<int32_t>();
  if (block_size < 1 || block_size > 1024) {
    throw UsageError("--block-size must be in [1, 1024], got " + std::to_string(block_size));
  }
  const ModelPreset* preset =
      vm.count("model") ? &find_model_preset(vm["model"].as<std::string>()) : nullptr;
  GqaConfig config = config_from_flags(read_gqa_flags(vm), preset);
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

  const std::string device_name = vm["device"].as<std::string>();
  attnrt_device device{ATTNRT_DEVICE_CPU, 0};
  if (device_name == "cuda") {
    device.device_type = ATTNRT_DEVICE_CUDA;
  } else if (device_name != "cpu") {
    throw UsageError("unknown --device '" + device_name + "' (known: cpu, cuda)");
  }
  const GqaTensors tensors = make_gqa_tensors(config, /*allocate=*/false);
  const RuntimePtr runtime = make_runtime(common.runtime);
  ExplanationPtr explanation;
  if (op == "paged_gqa") {
    PagedSession session(runtime.get(), config.attributes, block_size, ATTNRT_PAGED_KV_LAYOUT_BSNH,
                         config, /*allocate=*/false);
    explanation = session.explain(tensors);
  } else {
    GqaSession session(runtime.get(), config.attributes);
    explanation = session.explain(tensors, device);
  }
  const nlohmann::ordered_json result = explanation_json(explanation.get(), op);
  if (common.json) {
    std::cout << result.dump(2) << "\n";
    return 0;
  }
  std::cout << op << ": " << describe_config(config);
  if (op == "paged_gqa") std::cout << ", block_size " << block_size;
  std::cout << "\n\n";
  TextTable table({"rank", "kernel", "priority", "status", "reason"});
  int rank = 0;
  for (const auto& candidate : result["candidates"]) {
    table.add_row({std::to_string(++rank), candidate["kernel"].get<std::string>(),
                   std::to_string(candidate["priority"].get<int>()),
                   candidate["status"].get<std::string>(), candidate["reason"].get<std::string>()});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace plugin_inspect
