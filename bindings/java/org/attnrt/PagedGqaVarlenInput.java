package org.attnrt;

/**
 * Input positions of paged GroupQueryAttention over packed variable-length batches
 * ({@link PagedGqaVarlenOp}; values of attnrt_paged_gqa_varlen_input in the C header; a test
 * checks them against the library's names).
 */
public enum PagedGqaVarlenInput {
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
  /** Position 5: {@code query_start_loc}. */
  QUERY_START_LOC(5),
  /** Position 6: {@code seq_lens}. */
  SEQ_LENS(6),
  /** Position 7: {@code block_table}. */
  BLOCK_TABLE(7),
  /** Position 8: {@code slot_mapping}. */
  SLOT_MAPPING(8),
  /** Position 9: {@code head_sink}. */
  HEAD_SINK(9),
  /** Position 10: {@code k_scale}. */
  K_SCALE(10),
  /** Position 11: {@code v_scale}. */
  V_SCALE(11),
  /**
   * Position 12: {@code key_start_loc} (ABI 1.10): key and value rows of their own count, sequence
   * b's {@code [key_start_loc[b], key_start_loc[b + 1])}, written as its last tokens.
   */
  KEY_START_LOC(12),
  /** Position 13: {@code alibi_slopes} (ABI 1.10): float32 ALiBi slope of each query head. */
  ALIBI_SLOPES(13),
  /**
   * Position 14: {@code cos_cache} (ABI 1.12): rotary embedding's cosines, {@code [M, R/2]} of the
   * query's type, with the attribute do_rotary = 1.
   */
  COS_CACHE(14),
  /** Position 15: {@code sin_cache} (ABI 1.12): rotary embedding's sines, as cos_cache. */
  SIN_CACHE(15),
  /**
   * Position 16: {@code position_ids} (ABI 1.12): int64 rotary position of each query row, else
   * its token position.
   */
  POSITION_IDS(16),
  /**
   * Position 17: {@code key_position_ids} (ABI 1.12): int64 rotary position of each new key row,
   * else its token position.
   */
  KEY_POSITION_IDS(17),
  /** Number of positions (18). */
  NUM_INPUTS(18);

  private final int value;

  PagedGqaVarlenInput(int value) {
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
  public static PagedGqaVarlenInput swigToEnum(int value) {
    for (PagedGqaVarlenInput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no PagedGqaVarlenInput with value " + value);
  }
}
