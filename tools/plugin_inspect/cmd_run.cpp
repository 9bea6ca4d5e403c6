// plugin-inspect run: option parsing and the choice between a model workload (--model) and
// .npy inputs (--inputs/--outputs).
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "model_presets.h"
#include "run_common.h"

namespace plugin_inspect {
namespace {

constexpr const char* kUsage =
    "usage: plugin-inspect run [--model NAME] [--context N] [--steps N] [--batch N] [--seed N]\n"
    "                          [--check|--no-check] [--check-prompt] [--tolerance X]\n"
    "                          [--paged BLOCK_SIZE] [flags]\n"
    "       plugin-inspect run --inputs DIR --outputs DIR --num-heads N --kv-num-heads K [flags]\n"
    "\n"
    "Model mode: a first prompt of --context tokens fills a KV cache of capacity context+steps\n"
    "(past and present share one buffer, RoPE from the preset's theta), then --steps decode\n"
    "steps of one token each reuse one plan. Per phase it prints the kernel, ms per step (decode:\n"
    "median), tokens/s and the max abs error of output, present_key and present_value against\n"
    "the scalar reference (a second runtime pinned to '*.scalar' on identical inputs and a copy\n"
    "of the cache). The prompt is checked only up to --context 1024 unless --check-prompt.\n"
    "--paged BLOCK_SIZE (1..1024) runs the prompt and the steps with the paged op instead\n"
    "(blocks in --paged-layout bsnh|bnsh): the sequences live in a block pool, K/V in block\n"
    "pools read through the block table; present rows are read back through the table and\n"
    "checked as in a contiguous run.\n"
    "Exit code 1 when an error exceeds --tolerance.\n"
    "\n"
    "File mode: reads ONNX Runtime-named inputs (query.npy, key.npy, value.npy, past_key.npy,\n"
    "past_value.npy, seqlens_k.npy, total_sequence_length.npy, cos_cache.npy, sin_cache.npy,\n"
    "position_ids.npy, attention_bias.npy, head_sink.npy, k_scale.npy, v_scale.npy) and the\n"
    "optional DIR/attributes.json (ONNX attribute names; flags override it), writes output.npy,\n"
    "present_key.npy, present_value.npy (and output_qk.npy) to the --outputs folder. Every input\n"
    "must be a regular file (not a FIFO or device); any other *.npy name in DIR is an error, but\n"
    "the output names are ignored. attributes.json values are checked: integer attributes take\n"
    "JSON integers within int32 (not 4.0, not true/false: write 1 or 0), float attributes finite\n"
    "numbers, k_quant_type/v_quant_type strings; a key may appear once.\n"
    "\n"
    "Sizes are checked before anything is allocated: a run that needs more than this machine's\n"
    "physical memory is refused with the size it needs. With --json, errors are printed to\n"
    "stdout as {\"error\": {\"status\": ..., \"message\": ...}} (exit code unchanged).";

po::options_description run_options() {
  po::options_description desc("Run");
  desc.add_options()  //
      ("model", po::value<std::string>(),
       ("model preset (default " + std::string(kDefaultModel) + "; see plugin-inspect --help)")
           .c_str())                                                                      //
      ("context", po::value<int64_t>()->default_value(512), "prompt length (tokens)")     //
      ("steps", po::value<int64_t>()->default_value(8), "decode steps after the prompt")  //
      ("batch", po::value<int64_t>()->default_value(1), "batch size")                     //
      ("seed", po::value<std::string>(),
       "random seed 0..18446744073709551615 (default: from std::random_device)")  //
      ("check", "compare with the scalar reference kernel (default)")             //
      ("no-check", "skip the reference comparison")                               //
      ("check-prompt", "also check the prompt when --context > 1024 (slow)")      //
      ("tolerance", po::value<double>(),
       "max abs error allowed (default 1e-4 float32, 2e-3 float16, 1.6e-2 bfloat16)")   //
      ("inputs", po::value<std::string>(), "folder of .npy inputs (file mode)")         //
      ("outputs", po::value<std::string>(), "folder for the .npy outputs (file mode)")  //
      ("paged", po::value<int32_t>(),
       "run over a paged KV cache of this block size (model mode)")  //
      ("paged-layout", po::value<std::string>()->default_value("bsnh"),
       "block layout of the paged cache: bsnh (default) or bnsh");
  return desc;
}

// --seed: decimal digits only, within uint64 (Boost would read "-1" as 2^64 - 1).
uint64_t parse_seed(const std::string& text) {
  const auto reject = [&](const std::string& why) {
    return UsageError("--seed must be an integer in [0, " + std::to_string(UINT64_MAX) +
                      "], got '" + text + "'" + why);
  };
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    throw reject(text.starts_with('-') ? " (negative)" : "");
  }
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) throw reject(" (too large)");
  return value;
}

}  // namespace

int cmd_run(const Args& args) {
  if (sparse_mla_requested(args)) return cmd_run_sparse_mla(args);
  po::options_description desc;
  desc.add(run_options()).add(gqa_flag_options()).add(common_options());
  po::variables_map vm;
  if (!parse_command_line(args, desc, kUsage, vm)) return 0;

  RunOptions options;
  options.common = read_common_flags(vm);
  options.gqa = read_gqa_flags(vm);
  if (vm.count("model")) options.model = vm["model"].as<std::string>();
  options.context = vm["context"].as<int64_t>();
  options.steps = vm["steps"].as<int64_t>();
  options.batch = vm["batch"].as<int64_t>();
  options.seed = vm.count("seed") ? parse_seed(vm["seed"].as<std::string>())
                                  : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                        std::random_device{}();
  if (vm.count("check") && vm.count("no-check")) {
    throw UsageError("--check and --no-check exclude each other");
  }
  options.check = vm.count("no-check") == 0;
  options.check_prompt = vm.count("check-prompt") > 0;
  if (vm.count("tolerance")) {
    options.tolerance = vm["tolerance"].as<double>();
    if (!(*options.tolerance >= 0)) throw UsageError("--tolerance must be >= 0");
  }
  if (vm.count("inputs")) options.inputs_dir = vm["inputs"].as<std::string>();
  if (vm.count("outputs")) options.outputs_dir = vm["outputs"].as<std::string>();
  if (vm.count("paged")) {
    const int32_t block_size = vm["paged"].as<int32_t>();
    if (block_size < ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE ||
        block_size > ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) {
      throw UsageError("--paged must be a block size in [1, 1024], got " +
                       std::to_string(block_size));
    }
    options.paged_block_size = block_size;
  }
  const std::string layout = vm["paged-layout"].as<std::string>();
  if (layout != "bsnh" && layout != "bnsh") {
    throw UsageError("--paged-layout must be bsnh or bnsh, got '" + layout + "'");
  }
  options.paged_layout =
      layout == "bnsh" ? ATTNRT_PAGED_KV_LAYOUT_BNSH : ATTNRT_PAGED_KV_LAYOUT_BSNH;

  if (options.inputs_dir || options.outputs_dir) {
    if (!options.inputs_dir || !options.outputs_dir) {
      throw UsageError("--inputs and --outputs go together");
    }
    if (options.model) throw UsageError("--model and --inputs exclude each other");
    if (options.paged_block_size) throw UsageError("--paged applies to model mode, not --inputs");
    for (const char* name : {"context", "steps", "batch", "seed", "check-prompt"}) {
      if (vm.count(name) && !vm[name].defaulted()) {
        throw UsageError(std::string("--") + name + " does not apply with --inputs");
      }
    }
    for (const char* name : {"head-size", "dtype", "cache-dtype", "head-sink", "attention-bias",
                             "packed-qkv", "shared-buffer", "rope-theta"}) {
      if (vm.count(name)) {
        throw UsageError(std::string("--") + name +
                         " does not apply with --inputs (the .npy files define the inputs)");
      }
    }
    return run_files(options);
  }
  // total_sequence_length and seqlens_k are int32: each length must fit, and context + steps
  // too (checked with the memory the run needs, in run_model, where the sizes are known).
  if (options.context < 1 || options.context > INT32_MAX) {
    throw UsageError("--context must be in [1, " + std::to_string(INT32_MAX) + "], got " +
                     std::to_string(options.context));
  }
  if (options.steps < 0 || options.steps > INT32_MAX) {
    throw UsageError("--steps must be in [0, " + std::to_string(INT32_MAX) + "], got " +
                     std::to_string(options.steps));
  }
  if (options.batch < 1 || options.batch > INT32_MAX) {
    throw UsageError("--batch must be in [1, " + std::to_string(INT32_MAX) + "], got " +
                     std::to_string(options.batch));
  }
  if (options.gqa.shared_buffer) {
    throw UsageError("--shared-buffer is implied in model mode (the cache is always shared)");
  }
  return run_model(options);
}

}  // namespace plugin_inspect
