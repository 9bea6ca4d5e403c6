// Shared pieces of `plugin-inspect run`: its parsed options, the reference runtime, and the
// comparison of one call's outputs with the reference kernel's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt_handles.h"
#include "cli_options.h"
#include "gqa_session.h"
#include "gqa_workload.h"

namespace plugin_inspect {

struct RunOptions {
  CommonFlags common;
  GqaFlags gqa;
  std::optional<std::string> model;
  int64_t context = 512;
  int64_t steps = 8;
  int64_t batch = 1;
  uint64_t seed = 0;
  bool check = true;
  bool check_prompt = false;
  std::optional<double> tolerance;
  std::optional<std::string> inputs_dir;
  std::optional<std::string> outputs_dir;
  std::optional<int32_t> paged_block_size;  // --paged: run over a paged KV cache
  int32_t paged_layout = 0;                 // --paged-layout: attnrt_paged_kv_layout
  int32_t paged_p_precision = 0;            // --p-precision: attnrt_p_precision
};

int run_model(const RunOptions& options);  // --model (prompt + decode steps)
int run_files(const RunOptions& options);  // --inputs DIR --outputs DIR

// What the reference runtime pins when the kernel's algorithm has no scalar kernel.
inline constexpr const char* kReferenceKernelGlob = "*.scalar";

// The scalar kernel of `kernel`'s algorithm: "<plugin>.<op>.<algorithm>.scalar", with paged_gqa
// read as gqa (the reference runs the contiguous op on the same inputs).
std::string same_algorithm_scalar(const std::string& kernel);

// The reference's pin for `kernel`: same_algorithm_scalar(kernel) when `runtime` has that kernel
// (padded rows with a local window legitimately differ between algorithms, docs/gqa-semantics.md),
// else kReferenceKernelGlob.
std::string reference_glob(const attnrt_runtime* runtime, const std::string& kernel);

// The user's runtime settings with kernel pinned to `glob` and nothing disabled (so neither
// --disable nor ATTNRT_DISABLE can exclude the reference).
RuntimeSettings reference_settings(const RuntimeSettings& settings, const std::string& glob);

// Reference sessions of one GQA op: a runtime pinned to reference_glob(kernel) per kernel under
// test, made on first use (a prompt and its decode steps may run kernels of two algorithms).
class ReferenceSessions {
 public:
  ReferenceSessions(const attnrt_runtime* runtime, RuntimeSettings settings,
                    const attnrt_gqa_attributes& attributes);
  GqaSession& for_kernel(const std::string& kernel);

 private:
  struct Entry {
    std::string glob;
    RuntimePtr runtime;
    std::unique_ptr<GqaSession> session;
  };
  const attnrt_runtime* runtime_;
  RuntimeSettings settings_;
  attnrt_gqa_attributes attributes_;
  std::vector<Entry> entries_;
};

// "cpu_x86.gqa.flash.scalar (the scalar kernel of the same algorithm)": which reference kernel
// ran for `kernel` and why ("(not run)" when `reference` is empty).
std::string describe_reference(const std::string& kernel, const std::string& reference);

// --tolerance, else 1e-4 for float32, 2e-3 for float16 (one ulp near 1 is 9.8e-4 after rounding
// both results), 1.6e-2 for bfloat16.
double tolerance_for(const RunOptions& options, attnrt_dtype dtype);

// Max abs error per output (output, present_key, present_value, output_qk when produced).
struct OutputErrors {
  double output = 0;
  double present_key = 0;
  double present_value = 0;
  std::optional<double> output_qk;

  // Worst value so far of each output of `actual` against `reference`.
  void accumulate(const GqaTensors& actual, const GqaTensors& reference);
  double worst() const;
  nlohmann::ordered_json to_json() const;
  std::string to_text() const;  // "output 1.2e-07  present_key 0.0e+00  ..."
};

// NaN-safe "error exceeds tolerance" (NaN and inf fail).
inline bool exceeds(double error, double tolerance) { return !(error <= tolerance); }

}  // namespace plugin_inspect
