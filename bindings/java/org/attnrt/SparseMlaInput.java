package org.attnrt;

/**
 * Input positions of {@link SparseMlaOp} and {@link SparseMlaMetadataOp}, in CANN's order
 * (values of attnrt_sparse_mla_input in the C header; a test checks them against the library's names).
 */
public enum SparseMlaInput {
  /** Position 0: {@code q}. */
  Q(0),
  /** Position 1: {@code ori_kv}. */
  ORI_KV(1),
  /** Position 2: {@code cmp_kv}. */
  CMP_KV(2),
  /** Position 3: {@code ori_sparse_indices}. */
  ORI_SPARSE_INDICES(3),
  /** Position 4: {@code cmp_sparse_indices}. */
  CMP_SPARSE_INDICES(4),
  /** Position 5: {@code ori_block_table}. */
  ORI_BLOCK_TABLE(5),
  /** Position 6: {@code cmp_block_table}. */
  CMP_BLOCK_TABLE(6),
  /** Position 7: {@code cu_seqlens_q}. */
  CU_SEQLENS_Q(7),
  /** Position 8: {@code cu_seqlens_ori_kv}. */
  CU_SEQLENS_ORI_KV(8),
  /** Position 9: {@code cu_seqlens_cmp_kv}. */
  CU_SEQLENS_CMP_KV(9),
  /** Position 10: {@code seqused_q}. */
  SEQUSED_Q(10),
  /** Position 11: {@code seqused_ori_kv}. */
  SEQUSED_ORI_KV(11),
  /** Position 12: {@code seqused_cmp_kv}. */
  SEQUSED_CMP_KV(12),
  /** Position 13: {@code cmp_residual_kv}. */
  CMP_RESIDUAL_KV(13),
  /** Position 14: {@code ori_topk_length}. */
  ORI_TOPK_LENGTH(14),
  /** Position 15: {@code cmp_topk_length}. */
  CMP_TOPK_LENGTH(15),
  /** Position 16: {@code sinks}. */
  SINKS(16),
  /** Position 17: {@code metadata}. */
  METADATA(17),
  /** Number of positions (18). */
  NUM_INPUTS(18);

  private final int value;

  SparseMlaInput(int value) {
    this.value = value;
  }

  /**
   * The C value.
   *
   * @return the value
   */
  public int swigValue() {
    return value;
  }

  /**
   * The constant of a C value.
   *
   * @param value a C value
   * @return the constant
   * @throws IllegalArgumentException for an unknown value
   */
  public static SparseMlaInput swigToEnum(int value) {
    for (SparseMlaInput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no SparseMlaInput with value " + value);
  }
}
