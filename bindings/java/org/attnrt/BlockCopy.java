package org.attnrt;

import java.nio.ByteBuffer;

/**
 * A copy-on-write the caller makes before writing appended tokens ({@link BlockPool#append}): rows
 * [0, numTokens) of block {@code srcBlock} into block {@code dstBlock}, in the key and the value
 * pool.
 */
public final class BlockCopy {
  /** The shared block the rows come from. */
  public final int srcBlock;
  /** The fresh block of the writing sequence. */
  public final int dstBlock;
  /** Rows to copy (at least 1). */
  public final int numTokens;

  BlockCopy(int srcBlock, int dstBlock, int numTokens) {
    this.srcBlock = srcBlock;
    this.dstBlock = dstBlock;
    this.numTokens = numTokens;
  }

  /**
   * Copies block {@code srcBlock} to block {@code dstBlock} of a pool whose blocks are
   * {@code blockBytes} bytes each (block_size * Nkv * H * element bytes); copying the whole block
   * is correct for both kv layouts.
   *
   * @param pool the key or value pool (bytes from index 0, whatever its position)
   * @param blockBytes bytes per block
   */
  public void apply(ByteBuffer pool, long blockBytes) {
    int block = Math.toIntExact(blockBytes);
    ByteBuffer src = pool.duplicate();
    src.limit(Math.toIntExact((srcBlock + 1L) * block)).position(Math.toIntExact(srcBlock * blockBytes));
    ByteBuffer dst = pool.duplicate();
    dst.position(Math.toIntExact(dstBlock * blockBytes));
    dst.put(src);
  }

  @Override
  public String toString() {
    return "copy " + numTokens + " rows of block " + srcBlock + " into block " + dstBlock;
  }
}
