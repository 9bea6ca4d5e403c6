package org.attnrt;

/**
 * Sparse MLA ori_mask_mode / cmp_mask_mode values: none, right-down causal, sliding window (ori
 * side only, with ori_win_left / ori_win_right)
 * (the values of attnrt_sparse_mla_mask_mode in attnrt/ops/sparse_mla.h).
 */
public enum SparseMlaMaskMode {
  /** {@code ATTNRT_SPARSE_MLA_MASK_NONE} (0). */
  NONE(0),
  /** {@code ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL} (3). */
  RIGHT_DOWN_CAUSAL(3),
  /** {@code ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW} (4). */
  SLIDING_WINDOW(4);

  private final int value;

  SparseMlaMaskMode(int value) {
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
  public static SparseMlaMaskMode swigToEnum(int value) {
    for (SparseMlaMaskMode constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no SparseMlaMaskMode with value " + value);
  }
}
