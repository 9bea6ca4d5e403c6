// plugin-inspect explain/run --op sparse_mla: rank the sparse MLA kernels for a workload, or run
// the metadata op and the main op on random data (KV built with the public encoders), time the
// steps, and compare the chosen kernel with the scalar kernel.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "attnrt_handles.h"
#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "sparse_mla_workload.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

int32_t layout_from(const std::string& name, const char* flag) {
  if (name == "bsnd" || name == "BSND") return ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  if (name == "tnd" || name == "TND") return ATTNRT_SPARSE_MLA_LAYOUT_TND;
  if (name == "pa_bbnd" || name == "PA_BBND") return ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  throw UsageError(std::string(flag) + ": unknown layout '" + name + "' (bsnd, tnd, pa_bbnd)");
}

SparseMlaConfig config_from(const po::variables_map& vm) {
  SparseMlaConfig c;
  attnrt_sparse_mla_attributes_init(&c.attributes);
  attnrt_sparse_mla_attributes& a = c.attributes;
  const std::string scenario = vm["scenario"].as<std::string>();
  if (scenario == "swa") {
    c.scenario = ATTNRT_SPARSE_MLA_SWA;
  } else if (scenario == "csa") {
    c.scenario = ATTNRT_SPARSE_MLA_CSA;
  } else if (scenario == "hca") {
    c.scenario = ATTNRT_SPARSE_MLA_HCA;
  } else {
    throw UsageError("--scenario: expected swa, csa or hca, got '" + scenario + "'");
  }
  a.quant_mode = vm["quant-mode"].as<int>();
  a.layout_q = layout_from(vm["layout-q"].as<std::string>(), "--layout-q");
  a.layout_kv = layout_from(vm["layout-kv"].as<std::string>(), "--layout-kv");
  a.cmp_ratio = c.scenario == ATTNRT_SPARSE_MLA_SWA ? 1 : vm["cmp-ratio"].as<int>();
  const int window = vm["window"].as<int>();
  if (window < 0) throw UsageError("--window must be >= 0");
  a.ori_mask_mode = window > 0 ? 4 : 3;
  a.ori_win_left = window > 0 ? window - 1 : -1;
  a.ori_win_right = window > 0 ? 0 : -1;
  a.cmp_mask_mode = 3;
  a.return_softmax_lse = vm["lse"].as<bool>() ? 1 : 0;
  const std::string dtype = vm["dtype"].as<std::string>();
  if (dtype != "bf16" && dtype != "bfloat16" && dtype != "f16" && dtype != "float16") {
    throw UsageError(
        "--dtype: unknown q dtype '" + dtype +
        "' for --op sparse_mla (expected bfloat16 or float16, also spelled bf16, f16)");
  }
  c.fp16 = dtype == "f16" || dtype == "float16";
  c.batch = vm["batch"].as<int64_t>();
  c.q_len = vm["q-len"].as<int64_t>();
  c.kv_len = vm["kv-len"].as<int64_t>();
  c.num_heads = vm["num-heads"].as<int64_t>();
  c.topk = vm["topk"].as<int64_t>();
  c.block_size = vm["block-size"].as<int64_t>();
  c.topk_value_mode = vm["topk-value-mode"].as<int>();
  c.block_stride = vm["block-stride"].as<int64_t>();
  return c;
}

// The problem as JSON: the settings and every tensor's name, shape, dtype and device.
nlohmann::ordered_json problem_json(const SparseMlaConfig& c, const SparseMlaWorkload& w) {
  const attnrt_sparse_mla_attributes& a = c.attributes;
  nlohmann::ordered_json problem;
  problem["description"] = describe_sparse_mla(c);
  problem["scenario"] = c.scenario == ATTNRT_SPARSE_MLA_SWA   ? "swa"
                        : c.scenario == ATTNRT_SPARSE_MLA_CSA ? "csa"
                                                              : "hca";
  problem["quant_mode"] = a.quant_mode;
  const auto layout = [](int32_t l) {
    return l == ATTNRT_SPARSE_MLA_LAYOUT_BSND  ? "bsnd"
           : l == ATTNRT_SPARSE_MLA_LAYOUT_TND ? "tnd"
                                               : "pa_bbnd";
  };
  problem["layout_q"] = layout(a.layout_q);
  problem["layout_kv"] = layout(a.layout_kv);
  problem["batch"] = c.batch;
  problem["q_len"] = c.q_len;
  problem["kv_len"] = c.kv_len;
  problem["num_heads"] = c.num_heads;
  problem["topk"] = c.topk;
  problem["cmp_ratio"] = a.cmp_ratio;
  problem["window"] = a.ori_mask_mode == 4 ? a.ori_win_left + 1 : 0;
  problem["block_size"] = c.block_size;
  problem["block_stride"] = c.block_stride;
  problem["topk_value_mode"] = c.topk_value_mode;
  problem["dtype"] = c.fp16 ? "float16" : "bfloat16";
  problem["tensors"] = nlohmann::ordered_json::array();
  const auto in = w.inputs(true);
  const auto out = w.outputs();
  append_tensors_json(problem["tensors"], in.data(), in.size(),
                      [](size_t i) { return attnrt_op_input_name(ATTNRT_OP_SPARSE_MLA, i); });
  append_tensors_json(problem["tensors"], out.data(), out.size(),
                      [](size_t o) { return attnrt_op_output_name(ATTNRT_OP_SPARSE_MLA, o); });
  return problem;
}

struct Ops {
  OpPtr metadata, main;
};

Ops make_ops(attnrt_runtime* runtime, const attnrt_sparse_mla_attributes& a) {
  Ops ops;
  attnrt_op* raw = nullptr;
  check(attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &raw));
  ops.metadata.reset(raw);
  check(attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA, &a, &raw));
  ops.main.reset(raw);
  return ops;
}

// Metadata then `steps` timed runs of the main op; returns seconds per step and the kernel.
double run_steps(attnrt_runtime* runtime, const SparseMlaConfig& c, SparseMlaWorkload& w, int steps,
                 std::string* kernel) {
  Ops ops = make_ops(runtime, sparse_mla_op_attributes(c));
  const auto md_in = w.inputs(false);
  const attnrt_tensor* md_out[1] = {&w.in[ATTNRT_SPARSE_MLA_INPUT_METADATA].tensor};
  attnrt_plan* raw = nullptr;
  check(attnrt_op_plan(ops.metadata.get(), md_in.data(), md_in.size(), md_out, 1, &raw));
  PlanPtr md_plan(raw);
  check(attnrt_plan_run(md_plan.get(), md_in.data(), md_in.size(), md_out, 1, nullptr, 0, nullptr));
  const auto in = w.inputs(true);
  const auto out = w.outputs();
  check(attnrt_op_plan(ops.main.get(), in.data(), in.size(), out.data(), out.size(), &raw));
  PlanPtr plan(raw);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  check(attnrt_plan_get_info(plan.get(), &info));
  *kernel = info.kernel;
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    check(attnrt_plan_run(plan.get(), in.data(), in.size(), out.data(), out.size(), nullptr, 0,
                          nullptr));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

// FNV-1a 64 of the bytes, in hex: equal workloads (a strided cache and its compact copy, global
// slot ids and the block tables they come from) give equal outputs.
std::string digest(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

float half_to_float(uint16_t h, bool fp16) {
  if (!fp16) {
    const uint32_t bits = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                         : std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace

po::options_description sparse_mla_options(bool run) {
  po::options_description desc("Sparse MLA problem (--op sparse_mla)");
  desc.add_options()                                                                           //
      ("scenario", po::value<std::string>()->default_value("csa"), "swa, csa or hca")          //
      ("quant-mode", po::value<int>()->default_value(1), "1, 2 or 3")                          //
      ("layout-q", po::value<std::string>()->default_value("tnd"), "bsnd or tnd")              //
      ("layout-kv", po::value<std::string>()->default_value("pa_bbnd"), "bsnd, tnd, pa_bbnd")  //
      ("batch", po::value<int64_t>()->default_value(1), "batch size B")                        //
      ("q-len", po::value<int64_t>()->default_value(1), "query rows per batch S1")             //
      ("kv-len", po::value<int64_t>()->default_value(8192), "ori KV rows per batch S2")        //
      ("num-heads", po::value<int64_t>()->default_value(64), "query heads N")                  //
      ("topk", po::value<int64_t>()->default_value(2048), "CSA top-k width K")                 //
      ("cmp-ratio", po::value<int>()->default_value(4), "cmp_ratio (CSA/HCA)")                 //
      ("window", po::value<int>()->default_value(128), "ori window W (0: causal)")             //
      ("block-size", po::value<int64_t>()->default_value(64), "PA_BBND block size")            //
      ("block-stride", po::value<int64_t>()->default_value(0),
       "PA_BBND: bytes from one cache block to the next, >= block_size * token bytes (the "
       "caches are views of a bigger buffer, as one layer's view of a cache shared by "
       "layers); 0: compact")  //
      ("topk-value-mode", po::value<int>()->default_value(1),
       "1: logical top-k positions with block tables; 3: global slot ids (PA_BBND, swa or "
       "csa): each row's window and top-k as block_id * block_size + offset, as vLLM passes "
       "them")  //
      ("dtype", po::value<std::string>()->default_value("bfloat16"),
       "q dtype: bfloat16 (bf16) or float16 (f16, quant mode 3)")  //
      ("lse", po::bool_switch(), "also return softmax_lse");
  if (run) desc.add_options()("steps", po::value<int>()->default_value(3), "timed runs");
  desc.add_options()("seed", po::value<uint64_t>()->default_value(1), "random seed");
  return desc;
}

int explain_sparse_mla(const po::variables_map& vm) {
  const CommonFlags common = read_common_flags(vm);
  const attnrt_device device = device_from_flags(vm);
  const SparseMlaConfig c = config_from(vm);
  SparseMlaWorkload w;
  make_sparse_mla_workload(c, /*allocate=*/false, vm["seed"].as<uint64_t>(), &w);
  // --device: every tensor is described as living there (the op wants them all on q's device).
  for (SparseMlaBuffer& buffer : w.in) buffer.tensor.device = device;
  for (SparseMlaBuffer& buffer : w.out) buffer.tensor.device = device;
  const RuntimePtr runtime = make_runtime(common.runtime);
  Ops ops = make_ops(runtime.get(), sparse_mla_op_attributes(c));
  const auto in = w.inputs(true);
  const auto out = w.outputs();
  attnrt_explanation* raw = nullptr;
  check(attnrt_op_explain(ops.main.get(), in.data(), in.size(), out.data(), out.size(), &raw));
  const ExplanationPtr explanation(raw);
  nlohmann::ordered_json result = runtime_json(runtime.get());
  result["op"] = "sparse_mla";
  result["device"] = device_name(device.device_type);
  result["problem"] = problem_json(c, w);
  result["candidates"] = explanation_json(explanation.get());
  if (common.json) {
    std::cout << dump_json(result) << "\n";
    return 0;
  }
  print_explanation(result, "sparse_mla: " + describe_sparse_mla(c) + ", device " +
                                device_name(device.device_type));
  return 0;
}

int run_sparse_mla(const po::variables_map& vm) {
  const CommonFlags common = read_common_flags(vm);
  const SparseMlaConfig c = config_from(vm);
  const int steps = vm["steps"].as<int>();
  if (steps < 1) throw UsageError("--steps must be >= 1");
  const uint64_t seed = vm["seed"].as<uint64_t>();
  SparseMlaWorkload w;
  make_sparse_mla_workload(c, /*allocate=*/true, seed, &w);
  const RuntimePtr runtime = make_runtime(common.runtime);
  std::string kernel;
  const double seconds = run_steps(runtime.get(), c, w, steps, &kernel);

  // The scalar kernel on the same inputs: the check of the chosen kernel.
  RuntimeSettings scalar_settings = common.runtime;
  scalar_settings.kernel = "*.sparse_mla.*.scalar";
  scalar_settings.disable = "";
  const RuntimePtr scalar_runtime = make_runtime(scalar_settings);
  SparseMlaWorkload reference;
  make_sparse_mla_workload(c, /*allocate=*/true, seed, &reference);
  std::string scalar_kernel;
  run_steps(scalar_runtime.get(), c, reference, 1, &scalar_kernel);
  const auto& got = w.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].bytes;
  const auto& want = reference.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].bytes;
  const size_t n = got.size() / 2;
  size_t close = 0;
  double max_diff = 0.0;
  for (size_t k = 0; k < n; ++k) {
    uint16_t a, b;
    std::memcpy(&a, got.data() + 2 * k, 2);
    std::memcpy(&b, want.data() + 2 * k, 2);
    const double x = half_to_float(a, c.fp16), y = half_to_float(b, c.fp16);
    const double diff = std::fabs(x - y);
    max_diff = std::max(max_diff, diff);
    if (diff <= 1e-4 + std::fabs(y) / 128.0) ++close;
  }
  const double fraction = n > 0 ? static_cast<double>(close) / n : 1.0;
  const bool pass = fraction >= 0.995;
  nlohmann::ordered_json result = runtime_json(runtime.get());
  result["op"] = "sparse_mla";
  result["problem"] = problem_json(c, w);
  result["kernel"] = kernel;
  result["ms_per_step"] = seconds * 1e3;
  result["query_tokens_per_s"] = static_cast<double>(w.query_tokens) / seconds;
  result["kv_gb_per_s"] = static_cast<double>(w.kv_bytes_per_run) * 1e-9 / seconds;
  result["attn_out_digest"] = digest(got);
  result["check"] = {{"against", scalar_kernel},
                     {"close_fraction", fraction},
                     {"max_abs_diff", max_diff},
                     {"pass", pass}};
  if (common.json) {
    std::cout << dump_json(result) << "\n";
  } else {
    std::cout << "sparse_mla: " << describe_sparse_mla(c) << "\n"
              << "kernel: " << kernel << " (" << result["threads"].get<int>() << " threads)\n"
              << "time: " << format_fixed(seconds * 1e3, 3) << " ms/step, "
              << format_fixed(result["query_tokens_per_s"].get<double>(), 1) << " query tokens/s, "
              << format_fixed(result["kv_gb_per_s"].get<double>(), 3) << " GB/s of KV read\n"
              << "check vs " << scalar_kernel << ": " << format_fixed(fraction * 100, 3)
              << "% within rtol 2^-7 + atol 1e-4, max |diff| " << format_error(max_diff) << "\n"
              << "attn_out digest: " << result["attn_out_digest"].get<std::string>() << "\n"
              << (pass ? "PASS" : "FAIL") << "\n";
  }
  return pass ? 0 : 1;
}

}  // namespace plugin_inspect
