package org.attnrt;

/**
 * Output positions of the paged GroupQueryAttention op ({@link PagedGqaOp}); the new K/V rows go
 * into the pools (inputs), in place
 * (values of attnrt_paged_gqa_output in the C header; a test checks them against the library's names).
 */
public enum PagedGqaOutput {
  /** Position 0: {@code output}. */
  OUTPUT(0),
  /** Position 1: {@code output_qk}. */
  OUTPUT_QK(1),
  /** Number of positions (2). */
  NUM_OUTPUTS(2);

  private final int value;

  PagedGqaOutput(int value) {
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
  public static PagedGqaOutput swigToEnum(int value) {
    for (PagedGqaOutput constant : values()) {
      if (constant.value == value) {
        return constant;
      }
    }
    throw new IllegalArgumentException("no PagedGqaOutput with value " + value);
  }
}
