// Private to the GroupQueryAttention driver (gqa_run.cpp, gqa_append.cpp, gqa_window.cpp): what
// the pieces share. Included only by those baseline-ISA files, never by the ISA files, and it
// declares only out-of-line functions (see gqa_run.h).
#pragma once

#include <cstddef>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"
#include "gqa_run.h"

namespace attnrt::cpu::gqa_driver {

// Scratch areas start on cache lines so slots of different threads never share one.
constexpr size_t kAlign = 64;

// bytes rounded up to a multiple of kAlign.
size_t AlignUp(size_t bytes);

// parallel_for body over (b, kv head) units (user is the GqaRun): appends the new K/V rows of each
// unit into key_cache/value_cache (RoPE on K, quantize-on-write) after its past rows
// (gqa_append.cpp).
void AppendKvUnits(void* user, size_t begin, size_t end);

// sliding_window_cache=1 (gqa_window.cpp): points `r` at the planned step in `area` (GqaWindowPlan
// ran) with present_key/present_value as the real cache, and seeds the cache attention reads with
// the resident rows.
void BeginWindow(const attnrt_host_services& host, const attnrt_gqa_args& args, void* area,
                 GqaRun& r);

}  // namespace attnrt::cpu::gqa_driver
