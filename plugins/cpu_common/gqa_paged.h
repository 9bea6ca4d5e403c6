// The paged GroupQueryAttention kernels of every CPU plugin (attnrt/ops/paged_gqa.h,
// attnrt/ops/paged_gqa_varlen.h; llama.cpp PR 18747, vLLM PagedAttention), as entry points that a
// plugin instantiates with its own ISA (gqa_paged_entry.h) and lists in its kernel list
// (kernel_list.cpp of cpu_x86 and cpu_arm):
//  - paged_gqa.flash: the gqa.flash algorithm (gqa_flash.cpp: tiles, online softmax, split-KV
//    decoding, the ISA block operations) reading K/V through the block table, so the outputs are
//    bitwise those of gqa.flash of the same ISA over a contiguous cache holding the same tokens;
//  - paged_gqa.naive: the gqa.naive row pipeline (gqa_pipeline.h) reading K/V through the block
//    table, for every problem gqa.naive accepts (what paged flash declines: softcap,
//    smooth_softmax, head_sink, qk_output, float16/bfloat16 prompts with a local window), each row
//    reaching Dot and Axpy as the same bytes as from a contiguous cache, so outputs are bitwise
//    those of gqa.naive of the same ISA; ranked below paged flash, as gqa.naive is below gqa.flash;
//  - paged_gqa_varlen.{flash,naive}: packed variable-length batches through the same algorithms
//    (tiles of one sequence's rows; a step whose every sequence has one query row takes the decode
//    paths, split-KV and grouped heads included).
// The new K/V rows are appended by the shared staging step (gqa_paged_stage.h), which follows
// query_start_loc and skips rows slot_mapping marks -1.
//
// Acceptance is the contiguous kernel's supports() (ISA checks included) on the equivalent
// contiguous problem: `contiguous_supports` below is that kernel's function.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"
#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// attnrt_kernel_desc::supports of a contiguous gqa kernel (plugin_context is a PluginContext*).
using GqaSupportsFn = int32_t (*)(void* plugin_context, const void* problem, char* reason,
                                  size_t reason_capacity) noexcept;

// paged_gqa.flash: supports() with gqa.flash's acceptance (`contiguous_supports`), workspace and
// run with the block operations `ops`.
int32_t PagedGqaFlashSupports(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity, GqaSupportsFn contiguous_supports) noexcept;
size_t PagedGqaFlashWorkspaceSize(void* plugin_context, const void* problem,
                                  const GqaFlashOps& ops) noexcept;
int32_t PagedGqaFlashRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                         const GqaFlashOps& ops) noexcept;

// paged_gqa.naive: supports() with gqa.naive's acceptance, workspace (attnrt_kernel_desc's
// signature) and run with the paged row pipeline `rows` (AttendRows<Ops, true>).
int32_t PagedGqaNaiveSupports(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity, GqaSupportsFn contiguous_supports) noexcept;
size_t PagedGqaNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept;
int32_t PagedGqaNaiveRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                         GqaAttendRowsFn rows) noexcept;

// paged_gqa_varlen: supports() of each algorithm (the prompt problem decides: a decode step is
// accepted wherever a prompt is; pools of two types, ABI 1.9, only by the naive kernels), then
// flash's and naive's workspace and run.
int32_t PagedGqaVarlenFlashSupports(void* plugin_context, const void* problem, char* reason,
                                    size_t reason_capacity,
                                    GqaSupportsFn contiguous_supports) noexcept;
int32_t PagedGqaVarlenNaiveSupports(void* plugin_context, const void* problem, char* reason,
                                    size_t reason_capacity,
                                    GqaSupportsFn contiguous_supports) noexcept;
size_t PagedGqaVarlenFlashWorkspaceSize(void* plugin_context, const void* problem,
                                        const GqaFlashOps& ops) noexcept;
int32_t PagedGqaVarlenFlashRun(void* plugin_context, const void* args, char* error,
                               size_t error_capacity, const GqaFlashOps& ops) noexcept;
size_t PagedGqaVarlenNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept;
int32_t PagedGqaVarlenNaiveRun(void* plugin_context, const void* args, char* error,
                               size_t error_capacity, GqaAttendRowsFn rows) noexcept;

}  // namespace attnrt::cpu
