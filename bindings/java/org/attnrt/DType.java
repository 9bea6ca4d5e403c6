package org.attnrt;

/** Element types attnrt knows, with their DLPack type code and width in bits. */
public enum DType {
  /** IEEE float32. */
  FLOAT32(DTypeCode.FLOAT, 32),
  /** IEEE float16. */
  FLOAT16(DTypeCode.FLOAT, 16),
  /** bfloat16. */
  BFLOAT16(DTypeCode.BFLOAT, 16),
  /** int8 (also the int8-quantized KV cache). */
  INT8(DTypeCode.INT, 8),
  /** uint8 (also the packed int4 KV cache, two nibbles per byte). */
  UINT8(DTypeCode.UINT, 8),
  /** int32 (seqlens_k, total_sequence_length). */
  INT32(DTypeCode.INT, 32),
  /** int64 (position_ids). */
  INT64(DTypeCode.INT, 64),
  /** float8 e4m3fn. */
  FLOAT8_E4M3FN(DTypeCode.FLOAT8_E4M3FN, 8),
  /** float8 e5m2 (ABI 1.11). */
  FLOAT8_E5M2(DTypeCode.FLOAT8_E5M2, 8),
  /** float8 e8m0fnu (scales). */
  FLOAT8_E8M0FNU(DTypeCode.FLOAT8_E8M0FNU, 8),
  /** Packed signed int4: two nibbles per byte, element 2i in the low nibble. */
  INT4(DTypeCode.INT, 4);

  private final DTypeCode code;
  private final int bits;

  DType(DTypeCode code, int bits) {
    this.code = code;
    this.bits = bits;
  }

  /** DLPack type code. */
  public int code() {
    return code.swigValue();
  }

  /** Width of one element in bits. */
  public int bits() {
    return bits;
  }
}
