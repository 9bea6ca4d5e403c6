// plugin-inspect run --inputs DIR --outputs DIR: one GQA call on .npy inputs named as ONNX
// Runtime names them, outputs written as .npy, checked against the scalar reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt_handles.h"
#include "dtypes.h"
#include "errors.h"
#include "gqa_session.h"
#include "npy_io.h"
#include "run_common.h"
#include "sizes.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

namespace fs = std::filesystem;

// Inputs a file may supply (q_norm_weight/k_norm_weight too, for the runtime to reject on CPU).
constexpr int kRequiredInputs[] = {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_SEQLENS_K,
                                   ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH};

// Nesting levels of attributes.json beyond which it is refused (a valid file has one).
constexpr int kMaxAttributesDepth = 64;

// A JSON value for messages: its type and text ("boolean true", "float 4.7", "string \"x\"").
std::string describe_json(const nlohmann::json& value) {
  std::string type = value.type_name();
  if (value.is_number_float()) type = "float";
  if (value.is_number_integer()) type = "integer";
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return type + " " + text;
}

[[noreturn]] void bad_attribute(const fs::path& path, const std::string& key,
                                const std::string& expected, const nlohmann::json& value,
                                const std::string& hint = "") {
  throw ToolError(path.string() + ": attribute '" + key + "': expected " + expected + ", got " +
                  describe_json(value) + hint);
}

// A JSON integer (not a float such as 4.0 or 4.7, not a boolean) within int32.
int32_t json_int32(const fs::path& path, const std::string& key, const nlohmann::json& value) {
  const std::string expected =
      "an integer in [" + std::to_string(INT32_MIN) + ", " + std::to_string(INT32_MAX) + "]";
  if (value.is_boolean()) {
    bad_attribute(path, key, expected, value, " (booleans are not accepted: write 1 or 0)");
  }
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(INT32_MAX)) return static_cast<int32_t>(v);
  } else if (value.is_number_integer()) {
    const auto v = value.get<int64_t>();
    if (v >= INT32_MIN && v <= INT32_MAX) return static_cast<int32_t>(v);
  }
  bad_attribute(path, key, expected, value);
}

// A finite JSON number (integer or float) within float range.
float json_float(const fs::path& path, const std::string& key, const nlohmann::json& value) {
  const std::string expected = "a finite number within float range";
  if (!value.is_number()) bad_attribute(path, key, expected, value);
  const auto v = value.get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
    bad_attribute(path, key, expected, value);
  }
  return static_cast<float>(v);
}

std::string json_string(const fs::path& path, const std::string& key, const nlohmann::json& value) {
  if (!value.is_string()) bad_attribute(path, key, "a string", value);
  return value.get<std::string>();
}

// attributes.json: ONNX attribute names → attnrt_gqa_attributes fields. Every value is checked
// for type and range before it is stored; a key may appear once.
attnrt_gqa_attributes read_attributes_json(const fs::path& path) {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  require_regular_file(path);
  std::ifstream stream(path);
  if (!stream) throw ToolError(path.string() + ": cannot open");
  const std::pair<const char*, int32_t*> int_attributes[] = {
      {"num_heads", &a.num_heads},
      {"kv_num_heads", &a.kv_num_heads},
      {"causal", &a.causal},
      {"local_window_size", &a.local_window_size},
      {"sliding_window_cache", &a.sliding_window_cache},
      {"do_rotary", &a.do_rotary},
      {"rotary_interleaved", &a.rotary_interleaved},
      {"smooth_softmax", &a.smooth_softmax},
      {"qk_output", &a.qk_output},
      {"kv_cache_bit_width", &a.kv_cache_bit_width}};
  const std::pair<const char*, float*> float_attributes[] = {
      {"scale", &a.scale}, {"softcap", &a.softcap}, {"qk_norm_epsilon", &a.qk_norm_epsilon}};
  const std::pair<const char*, int32_t*> quant_attributes[] = {{"k_quant_type", &a.k_quant_type},
                                                               {"v_quant_type", &a.v_quant_type}};
  try {
    // nlohmann keeps the last of repeated keys silently; the parser callback sees each one. It
    // also sees every object and array open: deep nesting is refused there, before the nested
    // values (whose destruction and printing recurse) can exhaust the stack.
    std::vector<std::vector<std::string>> keys(1);
    const auto callback = [&](int depth, nlohmann::json::parse_event_t event,
                              nlohmann::json& parsed) {
      if ((event == nlohmann::json::parse_event_t::object_start ||
           event == nlohmann::json::parse_event_t::array_start) &&
          depth >= kMaxAttributesDepth) {
        throw ToolError(path.string() + ": JSON nested deeper than " +
                        std::to_string(kMaxAttributesDepth) +
                        " levels (expected one flat object of attribute values)");
      }
      if (event == nlohmann::json::parse_event_t::key && depth == 1) {
        const std::string key = parsed.get<std::string>();
        if (std::find(keys[0].begin(), keys[0].end(), key) != keys[0].end()) {
          throw ToolError(path.string() + ": attribute '" + key + "' appears twice");
        }
        keys[0].push_back(key);
      }
      return true;
    };
    const nlohmann::json json = nlohmann::json::parse(stream, callback);
    if (!json.is_object()) {
      throw ToolError(path.string() + ": expected a JSON object, got " + describe_json(json));
    }
    for (const auto& [key, value] : json.items()) {
      bool known = false;
      for (const auto& [name, field] : int_attributes) {
        if (key == name) *field = json_int32(path, key, value), known = true;
      }
      for (const auto& [name, field] : float_attributes) {
        if (key == name) *field = json_float(path, key, value), known = true;
      }
      for (const auto& [name, field] : quant_attributes) {
        if (key == name) {
          *field = quant_type_from_name(json_string(path, key, value));
          known = true;
        }
      }
      if (!known) throw ToolError(path.string() + ": unknown attribute '" + key + "'");
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

// The dtype rules the tool knows (ONNX Runtime's schema); shapes are left to the runtime.
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
    const attnrt_dtype cache = quantized_cache_dtype(a);
    const std::string why =
        a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32
            ? std::string(a.kv_cache_bit_width == 4 ? " (Q4_0" : " (Q8_0") +
                  " blocks of a PER_BLOCK_32 cache)"
            : " (" + std::to_string(a.kv_cache_bit_width) + "-bit quantized cache)";
    expect_dtype(tensors, ATTNRT_GQA_INPUT_PAST_KEY, cache, why);
    expect_dtype(tensors, ATTNRT_GQA_INPUT_PAST_VALUE, cache, why);
  }
  expect_dtype(tensors, ATTNRT_GQA_INPUT_SEQLENS_K, kInt32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH, kInt32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_POSITION_IDS, kInt64);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_K_SCALE, kFloat32);
  expect_dtype(tensors, ATTNRT_GQA_INPUT_V_SCALE, kFloat32);
}

// Adds output, present_key, present_value and, with qk_output, output_qk: their sizes (and, with
// the check, the reference run's copies) are computed first and checked against the machine's
// memory, naming total_sequence_length.npy, which alone of the inputs sets sizes beyond the files'
// own; then they are allocated and poisoned.
void add_outputs(GqaTensors& tensors, const attnrt_gqa_attributes& a, bool check,
                 const fs::path& inputs_dir) {
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
  const int64_t N = a.num_heads, Nkv = a.kv_num_heads;  // both > 0 (run_files checks)
  const bool packed = !tensors.inputs[ATTNRT_GQA_INPUT_KEY];
  const int64_t H = hidden / (packed ? N + 2 * Nkv : N);
  const int32_t total_value = *total.as<int32_t>();
  const int64_t T = std::max<int64_t>(0, total_value);  // the runtime rejects T <= 0

  const TensorRef& past_key = tensors.inputs[ATTNRT_GQA_INPUT_PAST_KEY];
  int64_t P = 0, Hc = cache_head_size(a, H);
  attnrt_dtype cache_dtype = query.dtype();
  if (a.k_quant_type != ATTNRT_GQA_QUANT_NONE) cache_dtype = quantized_cache_dtype(a);
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
  // Descriptors first: nothing is allocated until the sizes are known to fit.
  GqaTensors planned = tensors;
  auto& out = planned.outputs;
  out[ATTNRT_GQA_OUTPUT_OUTPUT] =
      std::make_shared<HostTensor>(query.dtype(), std::vector{B, S, N * H}, false);
  out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] =
      std::make_shared<HostTensor>(cache_dtype, std::vector{B, Nkv, present_rows, Hc}, false);
  out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] =
      std::make_shared<HostTensor>(cache_dtype, std::vector{B, Nkv, present_rows, Hc}, false);
  if (a.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    out[ATTNRT_GQA_OUTPUT_OUTPUT_QK] =
        std::make_shared<HostTensor>(query.dtype(), std::vector{B, N, S, T}, false);
  }
  std::optional<uint64_t> needed = tensors_bytes(planned);
  if (check) needed = checked_add(needed, tensors_bytes(planned, nullptr, /*outputs_only=*/true));
  if (!fits_in_memory(needed)) {
    const HostTensor& present = *out[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
    std::string message = (inputs_dir / "total_sequence_length.npy").string() +
                          ": total_sequence_length " + std::to_string(total_value) +
                          " needs present_key and present_value " + present.shape_string() + " " +
                          dtype_name(present.dtype()) + " of " +
                          format_bytes(present.checked_nbytes()) + " each";
    if (out[ATTNRT_GQA_OUTPUT_OUTPUT_QK]) {
      const HostTensor& qk = *out[ATTNRT_GQA_OUTPUT_OUTPUT_QK];
      message += ", output_qk " + qk.shape_string() + " of " + format_bytes(qk.checked_nbytes());
    }
    throw ToolError(message + ", and " + format_bytes(needed) + " in all" +
                    (check ? " with the reference check's copies" : "") + memory_note());
  }
  for (int index = 0; index < ATTNRT_GQA_NUM_OUTPUTS; ++index) {
    const TensorRef& descriptor = out[static_cast<std::size_t>(index)];
    if (!descriptor) continue;
    tensors.outputs[static_cast<std::size_t>(index)] = std::make_shared<HostTensor>(
        descriptor->dtype(), descriptor->shape(), true, gqa_output_name(index));
  }
  poison_outputs(tensors);
}

// The .npy files of the inputs folder, checked by name: an input name is read, an output name
// (left by a run with --outputs the same folder) is ignored, anything else is rejected with the
// list of accepted names, so that a typo (attention_bais.npy) cannot silently drop an input.
std::vector<std::string> scan_inputs_folder(const fs::path& inputs_dir,
                                            std::vector<std::string>& ignored) {
  std::vector<std::string> npy_files;
  std::error_code ec;
  for (fs::directory_iterator it(inputs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() == ".npy") npy_files.push_back(path.filename().string());
  }
  if (ec) throw ToolError(inputs_dir.string() + ": cannot list (" + ec.message() + ")");
  std::sort(npy_files.begin(), npy_files.end());
  std::vector<std::string> inputs;
  for (const std::string& file : npy_files) {
    const std::string stem = file.substr(0, file.size() - 4);
    bool is_input = false, is_output = false;
    for (int index = 0; index < ATTNRT_GQA_NUM_INPUTS; ++index) {
      is_input = is_input || stem == gqa_input_name(index);
    }
    for (int index = 0; index < ATTNRT_GQA_NUM_OUTPUTS; ++index) {
      is_output = is_output || stem == gqa_output_name(index);
    }
    if (is_input) {
      inputs.push_back(file);
    } else if (is_output) {
      ignored.push_back(file);
    } else {
      std::string accepted;
      for (int index = 0; index < ATTNRT_GQA_NUM_INPUTS; ++index) {
        accepted += std::string(accepted.empty() ? "" : ", ") + gqa_input_name(index) + ".npy";
      }
      throw ToolError((inputs_dir / file).string() + ": unknown input name (accepted: " + accepted +
                      "; output names are ignored)");
    }
  }
  return inputs;
}

}  // namespace

int run_files(const RunOptions& options) {
  const fs::path inputs_dir = *options.inputs_dir, outputs_dir = *options.outputs_dir;
  std::error_code ec;
  if (!fs::exists(inputs_dir, ec)) throw ToolError(inputs_dir.string() + ": no such folder");
  if (!fs::is_directory(inputs_dir, ec)) throw ToolError(inputs_dir.string() + ": not a folder");
  if (fs::exists(outputs_dir, ec) && !fs::is_directory(outputs_dir, ec)) {
    throw ToolError("--outputs " + outputs_dir.string() + ": not a folder");
  }
  std::vector<std::string> ignored;
  const std::vector<std::string> input_files = scan_inputs_folder(inputs_dir, ignored);

  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  const fs::path attributes_path = inputs_dir / "attributes.json";
  if (fs::exists(fs::symlink_status(attributes_path, ec))) {
    attributes = read_attributes_json(attributes_path);
  }
  apply_gqa_flags(options.gqa, attributes);
  if (attributes.num_heads == 0 || attributes.kv_num_heads == 0) {
    throw UsageError(
        "--num-heads and --kv-num-heads are required (or num_heads and kv_num_heads "
        "in " +
        attributes_path.string() + ")");
  }
  if (attributes.num_heads < 0 || attributes.kv_num_heads < 0) {
    throw UsageError("num_heads and kv_num_heads must be positive, got " +
                     std::to_string(attributes.num_heads) + " and " +
                     std::to_string(attributes.kv_num_heads));
  }

  GqaTensors tensors;
  std::vector<std::string> read;
  for (int index = 0; index < ATTNRT_GQA_NUM_INPUTS; ++index) {
    const std::string file = std::string(gqa_input_name(index)) + ".npy";
    if (std::find(input_files.begin(), input_files.end(), file) == input_files.end()) continue;
    tensors.inputs[static_cast<std::size_t>(index)] =
        std::make_shared<HostTensor>(load_npy(inputs_dir / file));
    read.push_back(file);
  }
  for (int index : kRequiredInputs) {
    if (!tensors.inputs[static_cast<std::size_t>(index)]) {
      throw ToolError("missing required input " +
                      (inputs_dir / (std::string(gqa_input_name(index)) + ".npy")).string());
    }
  }
  check_input_dtypes(tensors, attributes);
  add_outputs(tensors, attributes, options.check, inputs_dir);
  for (int index = 0; index < ATTNRT_GQA_NUM_OUTPUTS; ++index) {
    if (!tensors.outputs[static_cast<std::size_t>(index)]) continue;
    require_writable_file_path(outputs_dir / (std::string(gqa_output_name(index)) + ".npy"));
  }
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
    // The scalar kernel of the algorithm that ran: naive and flash legitimately differ on padded
    // rows with a local window (docs/gqa-semantics.md).
    ReferenceSessions reference(runtime.get(), options.common.runtime, attributes);
    reference_kernel = reference.for_kernel(result.kernel).step(*reference_tensors).kernel;
    errors.accumulate(tensors, *reference_tensors);
  }

  fs::create_directories(outputs_dir, ec);
  if (ec)
    throw ToolError("--outputs " + outputs_dir.string() + ": cannot create (" + ec.message() + ")");
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
    nlohmann::ordered_json json = runtime_json(runtime.get());
    json["op"] = "gqa";
    json["inputs"] = inputs_dir.string();
    json["read"] = read;
    json["ignored"] = ignored;
    json["kernel"] = result.kernel;
    json["ms"] = result.ms;
    json["max_abs_error"] = options.check ? errors.to_json() : nlohmann::ordered_json(nullptr);
    json["checked"] = options.check;
    json["reference_kernel"] = reference_kernel;
    json["tolerance"] = tolerance;
    json["passed"] = !failed;
    json["written"] = written;
    std::cout << dump_json(json) << "\n";
  } else {
    std::cout << "read " << read.size() << " inputs from " << printable(inputs_dir.string()) << ":";
    for (const std::string& name : read) std::cout << " " << name;
    if (!ignored.empty()) {
      std::cout << "\nignored (output names):";
      for (const std::string& name : ignored) std::cout << " " << name;
    }
    std::cout << "\nkernel " << result.kernel << ", " << format_fixed(result.ms, 3) << " ms, "
              << runtime_threads(runtime.get()) << " threads\n";
    if (options.check) {
      std::cout << "reference: " << describe_reference(result.kernel, reference_kernel) << "\n"
                << "max abs error vs " << reference_kernel << ": " << errors.to_text()
                << " (tolerance " << format_error(tolerance) << ") "
                << (failed ? "FAILED" : "passed") << "\n";
    }
    for (const std::string& path : written) std::cout << "wrote " << printable(path) << "\n";
  }
  if (failed) {
    std::cerr << "error: max abs error above tolerance " << format_error(tolerance) << ": "
              << errors.to_text() << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace plugin_inspect
