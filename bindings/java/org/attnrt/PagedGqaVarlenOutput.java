package org.attnrt;

/**
 * Output positions of paged GroupQueryAttention over packed variable-length batches
 * ({@link PagedGqaVarlenOp}); the new K/V rows go into the pools (inputs), in place (values of
 * attnrt_paged_gqa_varlen_output in the C header; a test checks them against the library's names).
 */
public enum PagedGqaVarlenOutput {
  /** Position 0: {@code output}. */
  OUTPUT(0),
  /** Number of positions (1). */
  NUM_OUTPUTS(1);

  private final int value;

  PagedGqaVarlenOutput(int value) {
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
  public static PagedGqaVarlenOutput swigToEnum(int value) {
    for (PagedGqaVarlenOutput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no PagedGqaVarlenOutput with value " + value);
  }
}
