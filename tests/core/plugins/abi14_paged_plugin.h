/*
 * The output elements the ABI 1.4 fixture plugin (abi14_paged_plugin.c) writes from run(), float32,
 * in this order: what its varlen kernel read through the ABI 1.4 structs. Shared with the test that
 * checks them (tests/core/paged_varlen_abi14_test.cpp). Pure C, no attnrt headers: the plugin and
 * the test are built against different ABI versions.
 */
#ifndef ATTNRT_TESTS_ABI14_PAGED_PLUGIN_H_
#define ATTNRT_TESTS_ABI14_PAGED_PLUGIN_H_

enum Abi14PagedOut {
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

#endif /* ATTNRT_TESTS_ABI14_PAGED_PLUGIN_H_ */
