package org.attnrt;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.IntBuffer;

/**
 * A block table and seqlens_k from {@link BlockPool#blockTable(long[], int)}, in direct buffers:
 * the paged GroupQueryAttention inputs {@code block_table} int32 [numSequences, maxBlocksPerSeq]
 * and {@code seqlens_k} int32 [numSequences].
 */
public final class BlockTable {
  /** Block ids, row-major [numSequences, maxBlocksPerSeq]; -1 in unused slots. */
  public final IntBuffer table;
  /** Length - 1 of each sequence. */
  public final IntBuffer seqlensK;
  /** Rows. */
  public final int numSequences;
  /** Slots per row. */
  public final int maxBlocksPerSeq;

  BlockTable(IntBuffer table, IntBuffer seqlensK, int numSequences, int maxBlocksPerSeq) {
    this.table = table;
    this.seqlensK = seqlensK;
    this.numSequences = numSequences;
    this.maxBlocksPerSeq = maxBlocksPerSeq;
  }

  /**
   * The block in slot {@code slot} of row {@code sequence}.
   *
   * @param sequence row index (not the sequence id)
   * @param slot logical block index
   * @return the physical block id, -1 when unused
   */
  public int block(int sequence, int slot) {
    return table.get(sequence * maxBlocksPerSeq + slot);
  }

  static IntBuffer ints(long count) {
    return ByteBuffer.allocateDirect(Math.toIntExact(Math.max(1, count) * 4))
        .order(ByteOrder.nativeOrder()).asIntBuffer();
  }
}
