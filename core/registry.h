// The ranked kernel registry and candidate evaluation (docs/plugins.md): every kernel of an op in
// rank order (priority descending, then name), kept whole so that a declining kernel falls through
// to the next and explain can report every reason.
#pragma once

#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "core/ops/op_family.h"
#include "core/plugin_record.h"
#include "core/runtime_config.h"

namespace attnrt::core {

struct Candidate {
  const KernelRecord* kernel = nullptr;
  attnrt_candidate_status status = ATTNRT_CANDIDATE_DECLINED;
  std::string reason;
  // supports() threw or returned neither 0 nor 1: the kernel is broken, not declining.
  bool malfunction = false;
};

class Registry {
 public:
  void Build(const std::vector<std::unique_ptr<PluginRecord>>& plugins);

  // Kernels registered for `op_kind`, in rank order.
  std::vector<const KernelRecord*> KernelsFor(int32_t op_kind) const;

  // Evaluates every kernel of the op against a validated problem: the first acceptable one is
  // SELECTED, later acceptable ones ELIGIBLE, the others carry their status and reason. A problem
  // that uses a feature of ABI 1.`problem.abi_need().minor` is not offered to kernels of plugins
  // built for an older minor version (they would not read the fields that describe it); the others
  // get it in the layout their plugin's ABI version has (Problem::abi_for).
  std::vector<Candidate> Evaluate(const RuntimeConfig& config, int32_t op_kind,
                                  const Problem& problem) const;

 private:
  std::vector<const KernelRecord*> ranked_;
};

// The code of a failed selection: ATTNRT_ERROR_INTERNAL when some kernel's supports() malfunctioned
// (the failure is the kernel's, not the problem's), else ATTNRT_ERROR_UNSUPPORTED.
attnrt_status RejectionCode(const std::vector<Candidate>& candidates);

// "no kernel accepts ...: k1: reason; k2: reason" for a failed selection.
std::string DescribeRejections(const std::vector<Candidate>& candidates);

}  // namespace attnrt::core
