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
  kOutCount
};

#endif /* ATTNRT_TESTS_OLD_ABI_PAGED_PLUGIN_H_ */
