// plugin-inspect run: option parsing and the choice between a model workload (--model) and
// .npy inputs (--inputs/--outputs).
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "model_presets.h"
#include "run_common.h"

namespace plugin_inspect {
namespace {

constexpr const char* kUsage =
    "usage: plugin-inspect run [--op gqa|paged_gqa|sparse_mla|paged_gqa_varlen] [options]\n"
    "       plugin-inspect run [--op gqa] [--model NAME] [--context N] [--steps N] [--batch N]\n"
    "                          [--seed N] [--check|--no-check] [--check-prompt] [--tolerance X]\n"
    "                          [attribute flags]\n"
    "       plugin-inspect run --op paged_gqa [--block-size BS] [--paged-layout bsnh|bnsh]\n"
    "           [--p-precision exact|input]\n"
    "                          [the model options] (--paged BS: short for --op paged_gqa\n"
    "                          --block-size BS)\n"
    "       plugin-inspect run [--op gqa] --inputs DIR --outputs DIR [--num-heads N\n"
    "                          --kv-num-heads K] [attribute flags]\n"
    "       plugin-inspect run --op sparse_mla [--scenario csa|hca|swa] [the sparse MLA options]\n"
    "       plugin-inspect run --op paged_gqa_varlen [--q-lens 1,1,37,1] [--seq-lens L,...]\n"
    "                          [--steps N] [the packed-batch options]\n"
    "\n"
    "Model mode (gqa, paged_gqa): a first prompt of --context tokens fills a KV cache of capacity\n"
    "context+steps (past and present share one buffer, RoPE from the preset's theta), then\n"
    "--steps decode steps of one token each reuse one plan. Per phase it prints the kernel, ms\n"
    "per step (decode: median), tokens/s and the max abs error of output, present_key and\n"
    "present_value against the reference: the scalar kernel of the kernel's own algorithm (a\n"
    "second runtime pinned to it, e.g. cpu_x86.gqa.naive.scalar for cpu_x86.gqa.naive.avx2, on\n"
    "identical inputs and a copy of the cache; '*.scalar' when the algorithm has no scalar\n"
    "kernel). The prompt is checked only up to --context 1024 unless --check-prompt.\n"
    "--op paged_gqa runs the prompt and the steps with the paged op instead (blocks of\n"
    "--block-size tokens, default 16, in --paged-layout bsnh|bnsh): the sequences live in a block\n"
    "pool, K/V in block pools read through the block table; present rows are read back through\n"
    "the table and checked against the contiguous op's scalar kernel of the same algorithm.\n"
    "Exit code 1 when an error exceeds --tolerance.\n"
    "\n"
    "File mode (gqa): reads ONNX Runtime-named inputs (query.npy, key.npy, value.npy,\n"
    "past_key.npy, past_value.npy, seqlens_k.npy, total_sequence_length.npy, cos_cache.npy,\n"
    "sin_cache.npy, position_ids.npy, attention_bias.npy, head_sink.npy, k_scale.npy,\n"
    "v_scale.npy) and the optional DIR/attributes.json (ONNX attribute names; flags override it),\n"
    "writes output.npy, present_key.npy, present_value.npy (and output_qk.npy) to the --outputs\n"
    "folder, and checks them as model mode does. Every input must be a regular file (not a FIFO\n"
    "or device); any other *.npy name in DIR is an error, but the output names are ignored.\n"
    "attributes.json is one flat JSON object (nesting is refused beyond 64 levels): integer\n"
    "attributes take JSON integers within int32 (not 4.0, not true/false: write 1 or 0), float\n"
    "attributes finite numbers, k_quant_type/v_quant_type strings; a key may appear once.\n"
    "\n"
    "Sparse MLA (sparse_mla): the metadata op and --steps timed runs on random data, checked\n"
    "against the scalar kernel.\n"
    "\n"
    "Packed variable-length batch (paged_gqa_varlen): one call over sequences of --q-lens new\n"
    "rows and --seq-lens context lengths on random data, timed over --steps runs (median), its\n"
    "output checked against the scalar kernel of the same algorithm.\n"
    "\n"
    "An option of another op is an error. Sizes are checked before anything is allocated: a run\n"
    "that needs more than this machine's physical memory is refused with the size it needs. With\n"
    "--json, errors are printed to stdout as {\"error\": {\"status\": ..., \"message\": ...}}\n"
    "(exit code unchanged).";

std::vector<OptionGroup> run_groups() {
  po::options_description workload("Workload (--op gqa, paged_gqa)");
  workload.add_options()  //
      ("model", po::value<std::string>(),
       ("model preset (default " + std::string(kDefaultModel) + "; see plugin-inspect --help)")
           .c_str())                                                                      //
      ("context", po::value<int64_t>()->default_value(512), "prompt length (tokens)")     //
      ("steps", po::value<int64_t>()->default_value(8), "decode steps after the prompt")  //
      ("batch", po::value<int64_t>()->default_value(1), "batch size")                     //
      ("seed", po::value<std::string>(),
       "random seed 0..18446744073709551615 (default: from std::random_device)");
  po::options_description check("Check (--op gqa, paged_gqa)");
  check.add_options()                                                         //
      ("check", "compare with the reference kernel (default)")                //
      ("no-check", "skip the reference comparison")                           //
      ("check-prompt", "also check the prompt when --context > 1024 (slow)")  //
      ("tolerance", po::value<double>(),
       "max abs error allowed (default 1e-4 float32, 2e-3 float16, 1.6e-2 bfloat16)");
  po::options_description files("Files (--op gqa)");
  files.add_options()                                                            //
      ("inputs", po::value<std::string>(), "folder of .npy inputs (file mode)")  //
      ("outputs", po::value<std::string>(), "folder for the .npy outputs (file mode)");
  return {{workload, {OpFamily::kGqa, OpFamily::kPagedGqa}},
          {check, {OpFamily::kGqa, OpFamily::kPagedGqa}},
          {files, {OpFamily::kGqa}},
          {paged_cache_options(/*shorthand=*/true), {OpFamily::kPagedGqa}},
          {gqa_flag_options(), {OpFamily::kGqa, OpFamily::kPagedGqa}},
          {sparse_mla_options(/*run=*/true), {OpFamily::kSparseMla}},
          {varlen_options(/*run=*/true), {OpFamily::kPagedGqaVarlen}},
          {common_options(), {}}};
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
  const OpFamily op = requested_op(args);
  po::variables_map vm;
  if (!parse_command_line(args, run_groups(), op, kUsage, vm)) return 0;
  if (op == OpFamily::kSparseMla) return run_sparse_mla(vm);
  if (op == OpFamily::kPagedGqaVarlen) return run_varlen(vm);

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
  if (op == OpFamily::kPagedGqa) {
    const PagedFlags paged = read_paged_flags(vm);
    options.paged_block_size = paged.block_size;
    options.paged_layout = paged.kv_layout;
    options.paged_p_precision = paged.p_precision;
  }

  if (options.inputs_dir || options.outputs_dir) {
    if (!options.inputs_dir || !options.outputs_dir) {
      throw UsageError("--inputs and --outputs go together");
    }
    if (options.model) throw UsageError("--model and --inputs exclude each other");
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
