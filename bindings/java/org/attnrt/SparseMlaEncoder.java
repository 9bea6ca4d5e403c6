package org.attnrt;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The sparse MLA KV token encoders (attnrt/ops/sparse_mla.h): rows of 512 values (nope dims
 * 0..447, rope dims 448..511) as float32 ({@code FloatBuffer}) or bfloat16 ({@code ShortBuffer})
 * into the token formats of {@link SparseMlaQuantMode}. Every row is validated before the first
 * output byte is written: on an error the output is untouched.
 */
public final class SparseMlaEncoder {
  /** Values per KV row. */
  public static final int HEAD_DIM = 512;

  private SparseMlaEncoder() {}

  private static DType rowType(Buffer kv) {
    return kv instanceof java.nio.ShortBuffer ? DType.BFLOAT16 : DType.FLOAT32;
  }

  private static void encode(SparseMlaQuantMode mode, Buffer kv, long numTokens, ByteBuffer out,
      long outBytes, long blockSize, long slot) {
    try (Tensors arrays = new Tensors(2)) {
      arrays.setNamed(0, "kv", kv, rowType(kv), numTokens, HEAD_DIM);
      arrays.setNamed(1, "out", out, DType.UINT8, outBytes);
      attnrt_c.sparse_mla_encode(mode, arrays, blockSize, slot);
    }
  }

  /**
   * quant_mode 1: {@code numTokens} rows into 608-byte tokens.
   *
   * @param kv direct float32 or bfloat16 buffer of numTokens * 512 values from its position
   * @param numTokens rows
   * @param out direct buffer receiving numTokens * 608 bytes from its position
   * @throws AttnrtException INVALID_ARGUMENT (non-finite values, rope overflowing bf16, sizes)
   */
  public static void encodeMode1(Buffer kv, long numTokens, ByteBuffer out) {
    encode(SparseMlaQuantMode.MODE1, kv, numTokens, out, numTokens * 608, 0, 0);
  }

  /**
   * quant_mode 2: {@code numTokens} rows into slots [slot, slot + numTokens) of one block-planar
   * block of {@code blockSize} tokens (blockSize * 584 bytes); the block's other slots are kept.
   *
   * @param kv direct float32 or bfloat16 buffer of numTokens * 512 values from its position
   * @param numTokens rows
   * @param block direct buffer holding the block (blockSize * 584 bytes) from its position
   * @param blockSize tokens per block, 1..1024
   * @param slot first slot written
   * @throws AttnrtException INVALID_ARGUMENT (values, block size, slots out of the block)
   */
  public static void encodeMode2(Buffer kv, long numTokens, ByteBuffer block, int blockSize,
      int slot) {
    encode(SparseMlaQuantMode.MODE2, kv, numTokens, block, (long) blockSize * 584, blockSize, slot);
  }

  /**
   * quant_mode 3: {@code numTokens} rows (already rotated) into 258-byte TQ4 tokens.
   *
   * @param kv direct float32 or bfloat16 buffer of numTokens * 512 values from its position
   * @param numTokens rows
   * @param out direct buffer receiving numTokens * 258 bytes from its position
   * @throws AttnrtException INVALID_ARGUMENT (non-finite values, a scale overflowing fp16, sizes)
   */
  public static void encodeTq4(Buffer kv, long numTokens, ByteBuffer out) {
    encode(SparseMlaQuantMode.MODE3_TQ4, kv, numTokens, out, numTokens * 258, 0, 0);
  }

  /**
   * Encodes every row of {@code kv} (its remaining values / 512) with quant mode 1 or 3 (the cmp_kv
   * tokens of mode 3) into a new buffer.
   *
   * @param mode {@link SparseMlaQuantMode#MODE1} or {@link SparseMlaQuantMode#MODE3_TQ4}
   * @param kv direct float32 or bfloat16 buffer of whole rows
   * @return a new direct buffer of rows * tokenBytes bytes
   * @throws AttnrtException INVALID_ARGUMENT for MODE2 (block-planar: {@link #encodeMode2}) or
   *     invalid values
   */
  public static ByteBuffer encode(SparseMlaQuantMode mode, Buffer kv) {
    if (mode == SparseMlaQuantMode.MODE2) {
      throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(),
          "quant_mode 2 encodes into blocks: use encodeMode2");
    }
    long rows = kv.remaining() / HEAD_DIM;
    ByteBuffer out = ByteBuffer.allocateDirect(Math.toIntExact(Math.max(1, rows * mode.tokenBytes())))
        .order(ByteOrder.nativeOrder());
    if (mode == SparseMlaQuantMode.MODE1) {
      encodeMode1(kv, rows, out);
    } else {
      encodeTq4(kv, rows, out);
    }
    return out;
  }

  /**
   * The 16 TQ4 codebook values, ascending (index = the 4-bit code).
   *
   * @return a new array of 16 values
   */
  public static float[] tq4Codebook() {
    float[] values = new float[16];
    for (int i = 0; i < 16; ++i) {
      values[i] = attnrt_c.sparse_mla_tq4_codebook(i);
    }
    return values;
  }
}
