/*
 * attnrt_sparse_mla_batch_at (attnrt/ops/sparse_mla.h, ABI 1.13): entry b of a sparse MLA run's
 * batches lies batch_stride bytes after entry b - 1 when the args carry batch_stride (their
 * struct_size covers it and it is not 0), and sizeof(attnrt_sparse_mla_batch) apart otherwise (the
 * args of ABI 1.6-1.12, which end at ori_sparse_indices). Entries are laid out 96 bytes apart,
 * filled with distinct values, and the gaps between them poisoned, so a wrong stride reads poison.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attnrt/ops/sparse_mla.h"

static int Check(const attnrt_sparse_mla_args* args, size_t stride, const char* what) {
  for (int64_t b = 0; b < 4; ++b) {
    const attnrt_sparse_mla_batch* x = attnrt_sparse_mla_batch_at(args, b);
    const attnrt_sparse_mla_batch* want =
        (const attnrt_sparse_mla_batch*)((const char*)args->batches + (size_t)b * stride);
    if (x != want || x->s1 != 10 + b || x->cmp_start != 1000 + b) {
      fprintf(stderr, "%s: entry %lld read at offset %lld, expected %zu (s1 %d)\n", what,
              (long long)b, (long long)((const char*)x - (const char*)args->batches),
              (size_t)b * stride, x->s1);
      return 1;
    }
  }
  return 0;
}

int main(void) {
  _Static_assert(sizeof(attnrt_sparse_mla_batch) < 96, "entries 96 bytes apart leave a gap");
  static unsigned char wide[4 * 96];
  static attnrt_sparse_mla_batch packed[4];
  memset(wide, 0xA5, sizeof wide);
  for (int b = 0; b < 4; ++b) {
    attnrt_sparse_mla_batch x;
    memset(&x, 0, sizeof x);
    x.s1 = 10 + b;
    x.cmp_start = 1000 + b;
    memcpy(wide + 96 * b, &x, sizeof x);
    packed[b] = x;
  }
  attnrt_sparse_mla_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = ATTNRT_SPARSE_MLA_ARGS_STRUCT_SIZE;
  args.batches = (const attnrt_sparse_mla_batch*)wide;
  args.batch_stride = 96;
  if (Check(&args, 96, "batch_stride 96")) return 1;
  /* Args of ABI 1.12 end at ori_sparse_indices: the stride is sizeof, whatever lies beyond. */
  args.struct_size = offsetof(attnrt_sparse_mla_args, batch_stride);
  args.batches = packed;
  if (Check(&args, sizeof(attnrt_sparse_mla_batch), "ABI 1.12 args")) return 1;
  /* A stride of 0 (args zero-filled by an older writer) is sizeof too. */
  args.struct_size = ATTNRT_SPARSE_MLA_ARGS_STRUCT_SIZE;
  args.batch_stride = 0;
  if (Check(&args, sizeof(attnrt_sparse_mla_batch), "batch_stride 0")) return 1;
  printf("attnrt_sparse_mla_batch_at: ok\n");
  return 0;
}
