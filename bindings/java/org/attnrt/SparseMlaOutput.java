package org.attnrt;

/**
 * Output positions of {@link SparseMlaOp}
 * (values of attnrt_sparse_mla_output in the C header; a test checks them against the library's names).
 */
public enum SparseMlaOutput {
  /** Position 0: {@code attn_out}. */
  ATTN_OUT(0),
  /** Position 1: {@code softmax_lse}. */
  SOFTMAX_LSE(1),
  /** Number of positions (2). */
  NUM_OUTPUTS(2);

  private final int value;

  SparseMlaOutput(int value) {
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
  public static SparseMlaOutput swigToEnum(int value) {
    for (SparseMlaOutput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no SparseMlaOutput with value " + value);
  }
}
