/*
 * The attn_out elements the ABI 1.4 sparse MLA fixture plugin (abi14_sparse_mla_plugin.c) writes
 * from run(), as bfloat16, in this order: fields its kernel read through the ABI 1.4 structs (small
 * integers, exact in bfloat16); every other attn_out element, and softmax_lse, is zero. Shared with
 * the test that checks them (tests/core/sparse_mla_abi14_test.cpp). Pure C, no attnrt headers: the
 * plugin and the test are built against different ABI versions.
 */
#ifndef ATTNRT_TESTS_ABI14_SPARSE_MLA_PLUGIN_H_
#define ATTNRT_TESTS_ABI14_SPARSE_MLA_PLUGIN_H_

#define ABI14_SPARSE_MLA_KERNEL "abi14sparse.sparse_mla.fixture.scalar"
/* Above every kernel of the sparse_mla plugin: the fixture is chosen wherever it is offered. */
#define ABI14_SPARSE_MLA_PRIORITY 100
/* attn_out[kMlaOutMarker]: says the fixture ran. */
#define ABI14_SPARSE_MLA_MARKER 7

enum Abi14SparseMlaOut {
  kMlaOutMarker,
  kMlaOutQuantMode,
  kMlaOutTopkValueMode,
  kMlaOutLayoutKv,
  kMlaOutScenario,
  kMlaOutNumHeads,
  kMlaOutOriBlockSize,
  kMlaOutOriRows,
  kMlaOutCmpBlockSize,
  kMlaOutTopk,
  kMlaOutCount
};

#endif /* ATTNRT_TESTS_ABI14_SPARSE_MLA_PLUGIN_H_ */
