package org.attnrt;

/** The KV token format of sparse MLA ({@code quant_mode}), with its bytes per token. */
public enum SparseMlaQuantMode {
  /**
   * quant_mode 1: bf16 q; 608-byte tokens (rope bf16[64], nope e4m3fn[448], bf16 scales[7], 18 pad
   * bytes); any kv layout. Encoder: {@link SparseMlaEncoder#encodeMode1}.
   */
  MODE1(1, 608),
  /**
   * quant_mode 2: bf16 q; PA_BBND only; block-planar blocks of block_size * 576 feature bytes then
   * block_size * 8 e8m0 scale bytes. Encoder: {@link SparseMlaEncoder#encodeMode2}.
   */
  MODE2(2, 584),
  /**
   * quant_mode 3: f16 or bf16 q; ori_kv unquantized in q's dtype; cmp_kv 258-byte TQ4 tokens
   * (4-bit codebook indices and an fp16 scale). Encoder: {@link SparseMlaEncoder#encodeTq4}.
   */
  MODE3_TQ4(3, 258);

  private final int value;
  private final int tokenBytes;

  SparseMlaQuantMode(int value, int tokenBytes) {
    this.value = value;
    this.tokenBytes = tokenBytes;
  }

  /**
   * The C value of quant_mode (1, 2 or 3).
   *
   * @return the C value
   */
  public int swigValue() {
    return value;
  }

  /**
   * Bytes per encoded token (kv_d): 608, 584 or 258 (quant_mode 3: of cmp_kv).
   *
   * @return bytes per token
   */
  public int tokenBytes() {
    return tokenBytes;
  }

  /**
   * The mode of a C value.
   *
   * @param value 1, 2 or 3
   * @return the mode
   * @throws IllegalArgumentException for another value (0: attributes whose mode was never set)
   */
  public static SparseMlaQuantMode swigToEnum(int value) {
    for (SparseMlaQuantMode mode : values()) {
      if (mode.value == value) {
        return mode;
      }
    }
    throw new IllegalArgumentException("no SparseMlaQuantMode with value " + value);
  }
}
