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
#include "text_output.h"

namespace plugin_inspect {
namespace {

constexpr const char* kUsage =
    "usage: plugin-inspect explain --op gqa [--model NAME] --batch B --seq-len S --past-len P\n"
    "           --num-heads N --kv-num-heads K --head-size H [--total-len T] [attribute flags]\n"
    "\n"
    "Ranks every kernel of the op for these shapes without running anything. --model takes the\n"
    "head counts, head size, window, softcap and rotary from a preset; explicit flags override.\n"
    "Default T: P + S; with --shared-buffer (P is the buffer capacity) S for a prompt, P for\n"
    "decode. Rotary caches have max(T, P) rows.";

po::options_description explain_options() {
  po::options_description desc("Problem");
  desc.add_options()                                                                             //
      ("op", po::value<std::string>()->default_value("gqa"), "op family (gqa)")                  //
      ("model", po::value<std::string>(), "model preset for heads, head size, window, softcap")  //
      ("batch", po::value<int64_t>()->default_value(1), "batch size B")                          //
      ("seq-len", po::value<int64_t>()->default_value(1), "new query tokens S")                  //
      ("past-len", po::value<int64_t>()->default_value(0), "past buffer rows P (0 = no past)")   //
      ("total-len", po::value<int64_t>(), "total_sequence_length T")                             //
      ("device", po::value<std::string>()->default_value("cpu"),
       "device of the tensors: cpu or cuda (seqlens_k and total_sequence_length stay on the host)");
  return desc;
}

nlohmann::ordered_json explanation_json(const attnrt_explanation* explanation) {
  nlohmann::ordered_json result;
  result["op"] = "gqa";
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
  if (vm["op"].as<std::string>() != "gqa") {
    throw UsageError("unknown --op '" + vm["op"].as<std::string>() + "' (known: gqa, sparse_mla)");
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
  GqaSession session(runtime.get(), config.attributes);
  const ExplanationPtr explanation = session.explain(tensors, device);
  const nlohmann::ordered_json result = explanation_json(explanation.get());
  if (common.json) {
    std::cout << result.dump(2) << "\n";
    return 0;
  }
  std::cout << "gqa: " << describe_config(config) << "\n\n";
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
