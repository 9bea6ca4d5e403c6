// plugin-inspect explain/run --op paged_gqa_varlen (attnrt/ops/paged_gqa_varlen.h): a packed
// batch of sequences given by their query lengths (--q-lens 1,1,37,1) and context lengths
// (--seq-lens), in block pools of --block-size tokens. explain ranks the kernels for it; run fills
// it with random data, times --steps runs and compares the output with the scalar kernel of the
// chosen kernel's algorithm on the same inputs.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "attnrt_handles.h"
#include "cli_options.h"
#include "commands.h"
#include "dtypes.h"
#include "errors.h"
#include "host_tensor.h"
#include "model_presets.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

struct VarlenConfig {
  attnrt_paged_gqa_attributes attributes{};
  std::string model;
  int64_t head_size = 0;
  attnrt_dtype dtype = kFloat32;
  std::vector<int32_t> q_lens, seq_lens;
  int64_t num_tokens = 0;
  int64_t max_blocks = 0;  // per sequence
  int64_t num_blocks = 0;  // in each pool
};

// "1,1,37,1" -> {1, 1, 37, 1}; each value in [lo, 2^31).
std::vector<int32_t> parse_lengths(const std::string& text, const char* flag, int32_t lo) {
  std::vector<int32_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    std::size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < lo || value > INT32_MAX) {
      throw UsageError(std::string("--") + flag + " must be comma-separated integers >= " +
                       std::to_string(lo) + ", got '" + text + "'");
    }
    values.push_back(static_cast<int32_t>(value));
  }
  if (values.empty() || (!text.empty() && text.back() == ',')) {
    throw UsageError(std::string("--") + flag + " must be comma-separated integers >= " +
                     std::to_string(lo) + ", got '" + text + "'");
  }
  return values;
}

VarlenConfig config_from(const po::variables_map& vm) {
  VarlenConfig c;
  c.model = vm.count("model") ? vm["model"].as<std::string>() : std::string(kDefaultModel);
  const ModelPreset& preset = find_model_preset(c.model);
  attnrt_paged_gqa_attributes_init(&c.attributes);
  attnrt_gqa_attributes& g = c.attributes.gqa;
  g.num_heads = vm.count("num-heads") ? vm["num-heads"].as<int>() : preset.num_heads;
  g.kv_num_heads = vm.count("kv-num-heads") ? vm["kv-num-heads"].as<int>() : preset.kv_num_heads;
  c.head_size = vm.count("head-size") ? vm["head-size"].as<int>() : preset.head_size;
  g.local_window_size =
      vm.count("local-window") ? vm["local-window"].as<int>() : preset.local_window_size;
  g.softcap = vm.count("softcap") ? vm["softcap"].as<float>() : preset.softcap;
  if (vm.count("scale")) g.scale = vm["scale"].as<float>();
  if (!std::isfinite(g.softcap) || !std::isfinite(g.scale)) {
    throw UsageError("--softcap and --scale must be finite numbers");
  }
  const PagedFlags paged = read_paged_flags(vm);
  c.attributes.block_size = paged.block_size;
  c.attributes.kv_layout = paged.kv_layout;
  c.attributes.p_precision = paged.p_precision;
  c.dtype = query_dtype_from_name(vm["dtype"].as<std::string>());

  if (vm.count("q-lens")) {
    c.q_lens = parse_lengths(vm["q-lens"].as<std::string>(), "q-lens", 0);
  } else {
    const int64_t batch = vm.count("batch") ? vm["batch"].as<int64_t>() : 1;
    if (batch < 1 || batch > 65536) {
      throw UsageError("--batch must be in [1, 65536], got " + std::to_string(batch));
    }
    c.q_lens.assign(static_cast<std::size_t>(batch), 1);
  }
  if (vm.count("batch") && vm["batch"].as<int64_t>() != static_cast<int64_t>(c.q_lens.size())) {
    throw UsageError("--batch " + std::to_string(vm["batch"].as<int64_t>()) + " but --q-lens has " +
                     std::to_string(c.q_lens.size()) + " sequences");
  }
  if (vm.count("seq-lens")) {
    c.seq_lens = parse_lengths(vm["seq-lens"].as<std::string>(), "seq-lens", 1);
    if (c.seq_lens.size() != c.q_lens.size()) {
      throw UsageError("--seq-lens has " + std::to_string(c.seq_lens.size()) +
                       " sequences, --q-lens " + std::to_string(c.q_lens.size()));
    }
  } else {
    for (int32_t q : c.q_lens) c.seq_lens.push_back(std::max(q, 1));
  }
  for (std::size_t b = 0; b < c.q_lens.size(); ++b) {
    if (c.seq_lens[b] < c.q_lens[b]) {
      throw UsageError("--seq-lens: sequence " + std::to_string(b) + " has context length " +
                       std::to_string(c.seq_lens[b]) + ", less than its query length " +
                       std::to_string(c.q_lens[b]) + " (--q-lens)");
    }
    c.num_tokens += c.q_lens[b];
    // In int64: a length near 2^31 plus the block size overflows int32.
    const int64_t blocks =
        (int64_t{c.seq_lens[b]} + c.attributes.block_size - 1) / c.attributes.block_size;
    c.max_blocks = std::max(c.max_blocks, blocks);
    c.num_blocks += blocks;
  }
  // query_start_loc and the block table are int32.
  if (c.num_tokens > INT32_MAX) {
    throw UsageError("--q-lens: the query rows add up to " + std::to_string(c.num_tokens) +
                     ", more than query_start_loc (int32) holds (2147483647)");
  }
  // A block table row addresses at most 2^31 - 1 tokens (the op's limit).
  if (c.max_blocks * c.attributes.block_size > INT32_MAX) {
    throw UsageError("--seq-lens: the longest sequence needs " + std::to_string(c.max_blocks) +
                     " blocks of --block-size " + std::to_string(c.attributes.block_size) + ", " +
                     std::to_string(c.max_blocks * c.attributes.block_size) +
                     " token slots, more than a block table row addresses (2147483647)");
  }
  if (c.num_blocks > INT32_MAX) {
    throw UsageError("--seq-lens: the sequences need " + std::to_string(c.num_blocks) +
                     " blocks of --block-size " + std::to_string(c.attributes.block_size) +
                     ", more than block_table (int32) numbers (2147483647)");
  }
  return c;
}

std::string join(const std::vector<int32_t>& values) {
  std::string text;
  for (int32_t v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

std::string describe(const VarlenConfig& c) {
  const attnrt_gqa_attributes& g = c.attributes.gqa;
  return "B=" + std::to_string(c.q_lens.size()) + " q_lens=" + join(c.q_lens) +
         " seq_lens=" + join(c.seq_lens) + " N=" + std::to_string(g.num_heads) +
         " Nkv=" + std::to_string(g.kv_num_heads) + " H=" + std::to_string(c.head_size) + " " +
         dtype_name(c.dtype) + ", block_size " + std::to_string(c.attributes.block_size) + " " +
         (c.attributes.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "BNSH" : "BSNH") +
         ", p_precision " +
         (c.attributes.p_precision == ATTNRT_P_PRECISION_INPUT ? "input" : "exact");
}

// The op's tensors: the host-read query_start_loc, seq_lens and block_table always hold their
// values; the others are descriptors only unless `allocate`.
struct VarlenTensors {
  std::vector<HostTensor> in;   // by attnrt_paged_gqa_varlen_input; unused ones empty
  std::vector<HostTensor> out;  // output
  std::vector<attnrt_tensor> in_views, out_views;
  std::vector<const attnrt_tensor*> in_ptrs, out_ptrs;

  void refresh(attnrt_device device) {
    in_views.clear();
    out_views.clear();
    for (const HostTensor& t : in) in_views.push_back(t.view());
    for (const HostTensor& t : out) out_views.push_back(t.view());
    in_ptrs.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, nullptr);
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].shape().empty()) continue;
      const bool host = i == ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC ||
                        i == ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS ||
                        i == ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE;
      if (!host) in_views[i].device = device;
      in_ptrs[i] = &in_views[i];
    }
    out_ptrs.clear();
    for (attnrt_tensor& t : out_views) {
      t.device = device;
      out_ptrs.push_back(&t);
    }
  }
};

VarlenTensors make_tensors(const VarlenConfig& c, bool allocate, uint64_t seed) {
  const attnrt_gqa_attributes& g = c.attributes.gqa;
  const int64_t b = static_cast<int64_t>(c.q_lens.size()), n = g.num_heads, nkv = g.kv_num_heads,
                h = c.head_size, bs = c.attributes.block_size;
  const bool bnsh = c.attributes.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const std::vector<int64_t> pool_shape = bnsh ? std::vector<int64_t>{c.num_blocks, nkv, bs, h}
                                               : std::vector<int64_t>{c.num_blocks, bs, nkv, h};
  VarlenTensors t;
  for (int i = 0; i < ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS; ++i)
    t.in.emplace_back(kFloat32, std::vector<int64_t>{}, false);
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] =
      HostTensor(c.dtype, {c.num_tokens, n * h}, allocate, "query");
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] =
      HostTensor(c.dtype, {c.num_tokens, nkv * h}, allocate, "key");
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] =
      HostTensor(c.dtype, {c.num_tokens, nkv * h}, allocate, "value");
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] =
      HostTensor(c.dtype, pool_shape, allocate, "key_cache");
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] =
      HostTensor(c.dtype, pool_shape, allocate, "value_cache");
  HostTensor qsl(kInt32, {b + 1}, true, "query_start_loc");
  HostTensor lens(kInt32, {b}, true, "seq_lens");
  HostTensor table(kInt32, {b, c.max_blocks}, true, "block_table");
  qsl.as<int32_t>()[0] = 0;
  int32_t next_block = 0;
  for (int64_t s = 0; s < b; ++s) {
    qsl.as<int32_t>()[s + 1] = qsl.as<int32_t>()[s] + c.q_lens[s];
    lens.as<int32_t>()[s] = c.seq_lens[s];
    const int64_t blocks = (int64_t{c.seq_lens[s]} + bs - 1) / bs;
    for (int64_t k = 0; k < c.max_blocks; ++k)
      table.as<int32_t>()[s * c.max_blocks + k] = k < blocks ? next_block++ : -1;
  }
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = std::move(qsl);
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = std::move(lens);
  t.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = std::move(table);
  t.out.emplace_back(c.dtype, std::vector<int64_t>{c.num_tokens, n * h}, allocate, "output");
  if (allocate) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (int i : {0, 1, 2, 3, 4}) {
      HostTensor& x = t.in[static_cast<std::size_t>(i)];
      for (std::size_t e = 0; e < x.numel(); ++e)
        store_element(x.data(), x.dtype(), e, uniform(rng));
    }
    t.out[0].poison();
  }
  t.refresh({ATTNRT_DEVICE_CPU, 0});
  return t;
}

OpPtr make_op(attnrt_runtime* runtime, const VarlenConfig& c) {
  attnrt_op* raw = nullptr;
  check(attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA_VARLEN, &c.attributes, &raw));
  return OpPtr(raw);
}

nlohmann::ordered_json problem_json(const VarlenConfig& c, const VarlenTensors& t) {
  const attnrt_gqa_attributes& g = c.attributes.gqa;
  nlohmann::ordered_json problem;
  problem["description"] = describe(c);
  problem["model"] = c.model;
  problem["batch"] = c.q_lens.size();
  problem["q_lens"] = c.q_lens;
  problem["seq_lens"] = c.seq_lens;
  problem["num_tokens"] = c.num_tokens;
  problem["num_heads"] = g.num_heads;
  problem["kv_num_heads"] = g.kv_num_heads;
  problem["head_size"] = c.head_size;
  problem["dtype"] = dtype_name(c.dtype);
  problem["local_window_size"] = g.local_window_size;
  problem["softcap"] = g.softcap;
  problem["scale"] = g.scale;
  problem["block_size"] = c.attributes.block_size;
  problem["kv_layout"] = c.attributes.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh";
  problem["p_precision"] = c.attributes.p_precision == ATTNRT_P_PRECISION_INPUT ? "input" : "exact";
  problem["tensors"] = nlohmann::ordered_json::array();
  append_tensors_json(problem["tensors"], t.in_ptrs.data(), t.in_ptrs.size(),
                      [](size_t i) { return attnrt_op_input_name(ATTNRT_OP_PAGED_GQA_VARLEN, i); });
  append_tensors_json(problem["tensors"], t.out_ptrs.data(), t.out_ptrs.size(), [](size_t o) {
    return attnrt_op_output_name(ATTNRT_OP_PAGED_GQA_VARLEN, o);
  });
  return problem;
}

// `steps` runs of one plan; returns the median seconds of a run and the kernel.
double run_steps(attnrt_runtime* runtime, const VarlenConfig& c, VarlenTensors& t, int steps,
                 std::string* kernel) {
  const OpPtr op = make_op(runtime, c);
  attnrt_plan* raw = nullptr;
  check(attnrt_op_plan(op.get(), t.in_ptrs.data(), t.in_ptrs.size(), t.out_ptrs.data(),
                       t.out_ptrs.size(), &raw));
  const PlanPtr plan(raw);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  check(attnrt_plan_get_info(plan.get(), &info));
  *kernel = info.kernel;
  const std::size_t align = std::max<std::size_t>(info.workspace_alignment, 64);
  std::vector<char> storage(info.workspace_size + align);
  void* workspace = storage.data();
  std::size_t space = storage.size();
  std::align(align, info.workspace_size, workspace, space);
  std::vector<double> seconds;
  for (int s = 0; s < steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    check(attnrt_plan_run(plan.get(), t.in_ptrs.data(), t.in_ptrs.size(), t.out_ptrs.data(),
                          t.out_ptrs.size(), workspace, info.workspace_size, nullptr));
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// "cpu_x86.paged_gqa_varlen.flash.avx512" -> "cpu_x86.paged_gqa_varlen.flash.scalar".
std::string scalar_of(const std::string& kernel) {
  const std::size_t dot = kernel.rfind('.');
  return dot == std::string::npos ? "*.scalar" : kernel.substr(0, dot) + ".scalar";
}

}  // namespace

po::options_description varlen_options(bool run) {
  po::options_description desc("Packed variable-length batch (--op paged_gqa_varlen)");
  desc.add_options()  //
      ("model", po::value<std::string>(),
       ("model preset for heads, head size, window, softcap (default " +
        std::string(kDefaultModel) + ")")
           .c_str())  //
      ("q-lens", po::value<std::string>(),
       "query rows per sequence, comma-separated (e.g. 1,1,37,1; default: --batch 1s)")  //
      ("seq-lens", po::value<std::string>(),
       "context length T_b per sequence, new rows included (default: the --q-lens)")  //
      ("batch", po::value<int64_t>(), "sequences B (the count of --q-lens)")          //
      ("block-size", po::value<int32_t>(), "tokens per block, 1..1024 (default 16)")  //
      ("paged-layout", po::value<std::string>()->default_value("bsnh"),
       "block layout of the pools: bsnh or bnsh")  //
      ("p-precision", po::value<std::string>()->default_value("exact"),
       "softmax probabilities for P·V: exact (float32) or input (rounded to the query dtype)")  //
      ("num-heads", po::value<int>(), "num_heads N (query heads)")                              //
      ("kv-num-heads", po::value<int>(), "kv_num_heads Nkv (N % Nkv == 0)")                     //
      ("head-size", po::value<int>(), "head size H (multiple of 8)")                            //
      ("local-window", po::value<int>(), "local_window_size W (-1 off)")                        //
      ("softcap", po::value<float>(), "softcap (applied when > 0)")                             //
      ("scale", po::value<float>(), "scale (0 = 1/sqrt(H))")                                    //
      ("dtype", po::value<std::string>()->default_value("float32"),
       "query, K/V and cache dtype float32|float16|bfloat16");
  if (run) {
    desc.add_options()                                                                 //
        ("steps", po::value<int>()->default_value(5), "timed runs (median reported)")  //
        ("seed", po::value<uint64_t>()->default_value(1), "random seed");
  }
  return desc;
}

int explain_varlen(const po::variables_map& vm) {
  const CommonFlags common = read_common_flags(vm);
  const attnrt_device device = device_from_flags(vm);
  const VarlenConfig c = config_from(vm);
  VarlenTensors t = make_tensors(c, /*allocate=*/false, 0);
  t.refresh(device);
  const RuntimePtr runtime = make_runtime(common.runtime);
  const OpPtr op = make_op(runtime.get(), c);
  attnrt_explanation* raw = nullptr;
  check(attnrt_op_explain(op.get(), t.in_ptrs.data(), t.in_ptrs.size(), t.out_ptrs.data(),
                          t.out_ptrs.size(), &raw));
  const ExplanationPtr explanation(raw);
  nlohmann::ordered_json result = runtime_json(runtime.get());
  result["op"] = "paged_gqa_varlen";
  result["device"] = device_name(device.device_type);
  result["problem"] = problem_json(c, t);
  result["candidates"] = explanation_json(explanation.get());
  if (common.json) {
    std::cout << dump_json(result) << "\n";
    return 0;
  }
  print_explanation(result, "paged_gqa_varlen: " + describe(c) + ", model " + c.model +
                                ", device " + device_name(device.device_type));
  return 0;
}

int run_varlen(const po::variables_map& vm) {
  const CommonFlags common = read_common_flags(vm);
  const VarlenConfig c = config_from(vm);
  const int steps = vm["steps"].as<int>();
  if (steps < 1) throw UsageError("--steps must be >= 1, got " + std::to_string(steps));
  const uint64_t seed = vm["seed"].as<uint64_t>();
  VarlenTensors t = make_tensors(c, /*allocate=*/true, seed);
  const RuntimePtr runtime = make_runtime(common.runtime);
  std::string kernel;
  const double seconds = run_steps(runtime.get(), c, t, steps, &kernel);

  // The scalar kernel of the same algorithm on the same inputs (each run rewrites the same new
  // rows into the pools, so repeated runs see the same cache).
  RuntimeSettings scalar_settings = common.runtime;
  scalar_settings.kernel = scalar_of(kernel);
  scalar_settings.disable = "";
  const RuntimePtr scalar_runtime = make_runtime(scalar_settings);
  VarlenTensors reference = make_tensors(c, /*allocate=*/true, seed);
  std::string scalar_kernel;
  run_steps(scalar_runtime.get(), c, reference, 1, &scalar_kernel);
  double max_diff = 0.0;
  const HostTensor& got = t.out[0];
  const HostTensor& want = reference.out[0];
  for (std::size_t e = 0; e < got.numel(); ++e) {
    const double diff = std::fabs(load_element(got.data(), got.dtype(), e) -
                                  load_element(want.data(), want.dtype(), e));
    max_diff = std::isnan(diff) ? diff : std::max(max_diff, diff);
    if (std::isnan(diff)) break;
  }
  const double tolerance = same_dtype(c.dtype, kFloat32)   ? 1e-4
                           : same_dtype(c.dtype, kFloat16) ? 2e-3
                                                           : 1.6e-2;
  const bool pass = max_diff <= tolerance;
  nlohmann::ordered_json result = runtime_json(runtime.get());
  result["op"] = "paged_gqa_varlen";
  result["problem"] = problem_json(c, t);
  result["kernel"] = kernel;
  result["steps"] = steps;
  result["ms_per_run"] = seconds * 1e3;
  result["query_tokens_per_s"] = static_cast<double>(c.num_tokens) / seconds;
  result["check"] = {{"against", scalar_kernel},
                     {"max_abs_error", max_diff},
                     {"tolerance", tolerance},
                     {"pass", pass}};
  if (common.json) {
    std::cout << dump_json(result) << "\n";
  } else {
    std::cout << "paged_gqa_varlen: " << describe(c) << "\n"
              << "kernel: " << kernel << " (" << result["threads"].get<int>() << " threads)\n"
              << "time: " << format_fixed(seconds * 1e3, 3) << " ms/run (median of " << steps
              << "), " << format_fixed(result["query_tokens_per_s"].get<double>(), 1)
              << " query tokens/s\n"
              << "check vs " << scalar_kernel << ": max abs error " << format_error(max_diff)
              << " (tolerance " << format_error(tolerance) << ")\n"
              << (pass ? "PASS" : "FAIL") << "\n";
  }
  return pass ? 0 : 1;
}

}  // namespace plugin_inspect
