// plugin-inspect run --inputs DIR --outputs DIR: one GQA call on .npy inputs named as ONNX
// Runtime names them, outputs written as .npy, checked against the scalar reference.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt_handles.h"
#include "dtypes.h"
#include "errors.h"
#include "gqa_session.h"
#include "npy_io.h"
#include "run_common.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

namespace fs = std::filesystem;

// Inputs a file may supply (q_norm_weight/k_norm_weight too, for the runtime to reject on CPU).
constexpr int kRequiredInputs[] = {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_SEQLENS_K,
                                   ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH};

// attributes.json: ONNX attribute names → attnrt_gqa_attributes fields.
attnrt_gqa_attributes read_attributes_json(const fs::path& path) {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  std::ifstream stream(path);
  if (!stream) throw ToolError(path.string() + ": cannot open");
  try {
    const nlohmann::json json = nlohmann::json::parse(stream);
    if (!json.is_object()) throw ToolError(path.string() + ": expected a JSON object");
    for (const auto& [key, value] : json.items()) {
      if (key == "num_heads")
        a.num_heads = value.get<int32_t>();
      else if (key == "kv_num_heads")
        a.kv_num_heads = value.get<int32_t>();
      else if (key == "causal")
        a.causal = value.get<int32_t>();
      else if (key == "scale")
        a.scale = value.get<float>();
      else if (key == "softcap")
        a.softcap = value.get<float>();
      else if (key == "local_window_size")
        a.local_window_size = value.get<int32_t>();
      else if (key == "sliding_window_cache")
        a.sliding_window_cache = value.get<int32_t>();
      else if (key == "do_rotary")
        a.do_rotary = value.get<int32_t>();
      else if (key == "rotary_interleaved")
        a.rotary_interleaved = value.get<int32_t>();
      else if (key == "smooth_softmax")
        a.smooth_softmax = value.get<int32_t>();
      else if (key == "qk_output")
        a.qk_output = value.get<int32_t>();
      else if (key == "k_quant_type")
        a.k_quant_type = quant_type_from_name(value.get<std::string>());
      else if (key == "v_quant_type")
        a.v_quant_type = quant_type_from_name(value.get<std::string>());
      else if (key == "kv_cache_bit_width")
        a.kv_cache_bit_width = value.get<int32_t>();
      else if (key == "qk_norm_epsilon")
        a.qk_norm_epsilon = value.get<float>();
      else
        throw ToolError(path.string() + ": unknown attribute '" + key + "'");
    }
  } catch (const nlohmann::json::exception& e) {
    throw ToolError(path.string() + ": " + e.what());
  } catch (const UsageError& e) {
    throw ToolError(path.string() + ": " + e.what());
  }
  return a;
}

void expect_dtype(const GqaTensors& tensors, int index, attnrt_dtype expected,
                  const std::string& why = "") {
  const TensorRef& tensor = tensors.inputs[static_cast<std::size_t>(index)];
  if (!tensor || same_dtype(tensor->dtype(), expected)) return;
  throw ToolError(std::string(gqa_input_name(index)) + ".npy: expected dtype " +
                  dtype_name(expected) + why + ", got " + dtype_name(tensor->dtype()));
}

// The dtype rules the tool knows (gqa-semantics.md §1.1, §4); shapes are left to the runtime.
void check_input_dtypes(const GqaTensors& tensors, const attnrt_gqa_attributes& a) {
  const attnrt_dtype query = tensors.inputs[ATTNRT_GQA_INPUT_QUERY]->dtype();
  if (!same_dtype(query, kFloat32) && !same_dtype(query, kFloat16)) {
    throw ToolError("query.npy: expected dtype float32 or float16, got " + dtype_name(query));
  }
  for (int index :
       {ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE, ATTNRT_GQA_INPUT_COS_CACHE,
        ATTNRT_GQA_INPUT_SIN_CACHE, ATTNRT_GQA_INPUT_ATTENTION_BIAS, ATTNRT_GQA_INPUT_HEAD_SINK,
        ATTNRT_GQA_INPUT_Q_NORM_WEIGHT, ATTNRT_GQA_INPUT_K_NORM_WEIGHT}) {
    expect_dtype(tensors, index, query, " (as query.npy)");
  }
  if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE) {
    for (int index : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
      expect_dtype(tensors, index, query, " (as query.npy; the cache is not quantized)");
    }
  } else if (a.kv_cache_bit_width == 4 || a.kv_cache_bit_width == 8) {
    const attnrt_dtype cache = a.kv_cache_bit_width == 4 ? kUInt8 : kInt8;
    const std::string why = " (" + std::to_string(a.kv_cache_bit_width) + "-bit quantized cache)";
    expect_dtype(tensors, ATTNRT_GQA_INPUT_PAST_KEY, cache, why);
    expect_dtype(tensors, ATTNRT_GQA_INPUT_PAST_VALUE, cache, why);
  }
  expect_dtype(tensors, ATTNRT_GQA_INPUT_SEQLENS_K, kInt32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH, kInt32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_POSITION_IDS, kInt64);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_K_SCALE, kFloat32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_V_SCALE, kFloat32);
}

// Allocates (and poisons) output, present_key, present_value and, with qk_output, output_qk.
void add_outputs(GqaTensors& tensors, const attnrt_gqa_attributes& a) {
  const HostTensor& query = *tensors.inputs[ATTNRT_GQA_INPUT_QUERY];
  if (query.shape().size() != 3) {
    throw ToolError("query.npy: expected rank 3 (batch, sequence, hidden), got shape " +
                    query.shape_string());
  }
  const HostTensor& total = *tensors.inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH];
  if (total.numel() != 1) {
    throw ToolError("total_sequence_length.npy: expected one element, got shape " +
                    total.shape_string());
  }
  const int64_t B = query.shape()[0], S = query.shape()[1], hidden = query.shape()[2];
  const int64_t N = a.num_heads, Nkv = a.kv_num_heads;
  const bool packed = !tensors.inputs[ATTNRT_GQA_INPUT_KEY];
  const int64_t H = hidden / (packed ? N + 2 * Nkv : N);
  const int64_t T = std::max<int64_t>(0, *total.as<int32_t>());  // the runtime rejects T <= 0

  const TensorRef& past_key = tensors.inputs[ATTNRT_GQA_INPUT_PAST_KEY];
  int64_t P = 0, Hc = a.kv_cache_bit_width == 4 ? H / 2 : H;
  attnrt_dtype cache_dtype = query.dtype();
  if (a.k_quant_type != ATTNRT_GQA_QUANT_NONE)
    cache_dtype = a.kv_cache_bit_width == 4 ? kUInt8 : kInt8;
  if (past_key) {
    if (past_key->shape().size() != 4) {
      throw ToolError(
          "past_key.npy: expected rank 4 (batch, kv_num_heads, past, head), got shape " +
          past_key->shape_string());
    }
    P = past_key->shape()[2];
    Hc = past_key->shape()[3];
    cache_dtype = past_key->dtype();
  }
  const int64_t present_rows = a.sliding_window_cache == 1 ? P : std::max(T, P);
  auto& out = tensors.outputs;
  out[ATTNRT_GQA_OUTPUT_OUTPUT] =
      std::make_shared<HostTensor>(query.dtype(), std::vector{B, S, N * H});
  out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] =
      std::make_shared<HostTensor>(cache_dtype, std::vector{B, Nkv, present_rows, Hc});
  out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] =
      std::make_shared<HostTensor>(cache_dtype, std::vector{B, Nkv, present_rows, Hc});
  if (a.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    out[ATTNRT_GQA_OUTPUT_OUTPUT_QK] =
        std::make_shared<HostTensor>(query.dtype(), std::vector{B, N, S, T});
  }
  poison_outputs(tensors);
}

}  // namespace

int run_files(const RunOptions& options) {
  const fs::path inputs_dir = *options.inputs_dir, outputs_dir = *options.outputs_dir;
  if (!fs::is_directory(inputs_dir)) throw ToolError(inputs_dir.string() + ": not a folder");

  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  const fs::path attributes_path = inputs_dir / "attributes.json";
  if (fs::exists(attributes_path)) attributes = read_attributes_json(attributes_path);
  apply_gqa_flags(options.gqa, attributes);
  if (attributes.num_heads == 0 || attributes.kv_num_heads == 0) {
    throw UsageError(
        "--num-heads and --kv-num-heads are required (or num_heads and kv_num_heads "
        "in " +
        attributes_path.string() + ")");
  }

  GqaTensors tensors;
  std::vector<std::string> read;
  for (int index = 0; index < ATTNRT_GQA_NUM_INPUTS; ++index) {
    const fs::path path = inputs_dir / (std::string(gqa_input_name(index)) + ".npy");
    if (!fs::exists(path)) continue;
    tensors.inputs[static_cast<std::size_t>(index)] = std::make_shared<HostTensor>(load_npy(path));
    read.push_back(path.filename().string());
  }
  for (int index : kRequiredInputs) {
    if (!tensors.inputs[static_cast<std::size_t>(index)]) {
      throw ToolError("missing required input " +
                      (inputs_dir / (std::string(gqa_input_name(index)) + ".npy")).string());
    }
  }
  check_input_dtypes(tensors, attributes);
  add_outputs(tensors, attributes);
  const attnrt_dtype dtype = tensors.inputs[ATTNRT_GQA_INPUT_QUERY]->dtype();
  const double tolerance = tolerance_for(options, dtype);

  const RuntimePtr runtime = make_runtime(options.common.runtime);
  GqaSession session(runtime.get(), attributes);
  std::optional<GqaTensors> reference_tensors;
  if (options.check) reference_tensors = reference_copy(tensors);
  const StepResult result = session.step(tensors);

  OutputErrors errors;
  std::string reference_kernel;
  if (options.check) {
    const RuntimePtr reference_runtime = make_runtime(reference_settings(options.common.runtime));
    GqaSession reference(reference_runtime.get(), attributes);
    reference_kernel = reference.step(*reference_tensors).kernel;
    errors.accumulate(tensors, *reference_tensors);
  }

  fs::create_directories(outputs_dir);
  std::vector<std::string> written;
  for (int index = 0; index < ATTNRT_GQA_NUM_OUTPUTS; ++index) {
    const TensorRef& output = tensors.outputs[static_cast<std::size_t>(index)];
    if (!output) continue;
    const fs::path path = outputs_dir / (std::string(gqa_output_name(index)) + ".npy");
    save_npy(path, *output);
    written.push_back(path.string());
  }
  const bool failed = options.check && exceeds(errors.worst(), tolerance);

  if (options.common.json) {
    nlohmann::ordered_json json;
    json["inputs"] = inputs_dir.string();
    json["read"] = read;
    json["kernel"] = result.kernel;
    json["ms"] = result.ms;
    json["threads"] = runtime_threads(runtime.get());
    json["max_abs_error"] = options.check ? errors.to_json() : nlohmann::ordered_json(nullptr);
    json["checked"] = options.check;
    json["reference_kernel"] = reference_kernel;
    json["tolerance"] = tolerance;
    json["passed"] = !failed;
    json["written"] = written;
    std::cout << json.dump(2) << "\n";
  } else {
    std::cout << "read " << read.size() << " inputs from " << inputs_dir.string() << ":";
    for (const std::string& name : read) std::cout << " " << name;
    std::cout << "\nkernel " << result.kernel << ", " << format_fixed(result.ms, 3) << " ms, "
              << runtime_threads(runtime.get()) << " threads\n";
    if (options.check) {
      std::cout << "max abs error vs " << reference_kernel << ": " << errors.to_text()
                << " (tolerance " << format_error(tolerance) << ") "
                << (failed ? "FAILED" : "passed") << "\n";
    }
    for (const std::string& path : written) std::cout << "wrote " << path << "\n";
  }
  if (failed) {
    std::cerr << "error: max abs error above tolerance " << format_error(tolerance) << ": "
              << errors.to_text() << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace plugin_inspect
