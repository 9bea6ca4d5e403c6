/*
 * The output elements the older-ABI fixture plugins (old_abi_paged_plugin.c) write from run(),
 * float32, in this order: what their varlen kernel read through their version's structs. Shared
 * with the test that checks them (tests/core/paged_varlen_old_abi_test.cpp). Pure C, no attnrt
 * headers: the plugins and the test are built against different ABI versions.
 */
#ifndef ATTNRT_TESTS_OLD_ABI_PAGED_PLUGIN_H_
#define ATTNRT_TESTS_OLD_ABI_PAGED_PLUGIN_H_

enum OldAbiPagedOut {
  kOutNumTokens,
  kOutHasSlotMapping,
  kOutMaxBlocksPerSeq,
  kOutBlockSize,
  kOutNumBlocks,
  kOutKvLayout,
  kOutBatchSize,
  kOutNumHeads,
  kOutKvNumHeads,
  kOutHeadSize,
  kOutKeyCacheStride0,
  kOutValueCacheStride0,
  kOutMaxQueryLen,
  kOutLastQueryStart,
  kOutWorkspaceSize,
  kOutSameProblemAsPlan,
  /* What the fixture's own headers say: sizeof of its varlen and paged problem structs and the
   * offsets of the varlen problem's own fields (which moved in ABI 1.5 and 1.8). */
  kOutVarlenProblemSize,
  kOutPagedProblemSize,
  kOutNumTokensOffset,
  kOutHasSlotMappingOffset,
  /* paged.p_precision (ABI 1.5) and paged.v_head_size (ABI 1.8); -1 where the fixture's version
   * has no such field. */
  kOutPPrecision,
  kOutValueHeadSize,
  /* The cache type of paged.gqa: the attributes' k_quant_type, v_quant_type and
   * kv_cache_bit_width, and cache_dtype's code and bits. */
  kOutKQuantType,
  kOutVQuantType,
  kOutKvCacheBitWidth,
  kOutCacheDtypeCode,
  kOutCacheDtypeBits,
  kOutCount
};

#endif /* ATTNRT_TESTS_OLD_ABI_PAGED_PLUGIN_H_ */
