package org.attnrt;

/**
 * Input positions of the paged GroupQueryAttention op ({@link PagedGqaOp}): GroupQueryAttention's,
 * with key_cache/value_cache in place of past_key/past_value and block_table appended
 * (values of attnrt_paged_gqa_input in the C header; a test checks them against the library's names).
 */
public enum PagedGqaInput {
  /** Position 0: {@code query}. */
  QUERY(0),
  /** Position 1: {@code key}. */
  KEY(1),
  /** Position 2: {@code value}. */
  VALUE(2),
  /** Position 3: {@code key_cache}. */
  KEY_CACHE(3),
  /** Position 4: {@code value_cache}. */
  VALUE_CACHE(4),
  /** Position 5: {@code seqlens_k}. */
  SEQLENS_K(5),
  /** Position 6: {@code total_sequence_length}. */
  TOTAL_SEQUENCE_LENGTH(6),
  /** Position 7: {@code cos_cache}. */
  COS_CACHE(7),
  /** Position 8: {@code sin_cache}. */
  SIN_CACHE(8),
  /** Position 9: {@code position_ids}. */
  POSITION_IDS(9),
  /** Position 10: {@code attention_bias}. */
  ATTENTION_BIAS(10),
  /** Position 11: {@code head_sink}. */
  HEAD_SINK(11),
  /** Position 12: {@code k_scale}. */
  K_SCALE(12),
  /** Position 13: {@code v_scale}. */
  V_SCALE(13),
  /** Position 14: {@code q_norm_weight}. */
  Q_NORM_WEIGHT(14),
  /** Position 15: {@code k_norm_weight}. */
  K_NORM_WEIGHT(15),
  /** Position 16: {@code block_table}. */
  BLOCK_TABLE(16),
  /** Number of positions (17). */
  NUM_INPUTS(17);

  private final int value;

  PagedGqaInput(int value) {
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
  public static PagedGqaInput swigToEnum(int value) {
    for (PagedGqaInput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no PagedGqaInput with value " + value);
  }
}
