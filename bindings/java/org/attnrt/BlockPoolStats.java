package org.attnrt;

/** Occupancy of a {@link BlockPool} ({@link BlockPool#stats()}). */
public final class BlockPoolStats {
  /** Blocks in the pool. */
  public final long numBlocks;
  /** Tokens per block. */
  public final int blockSize;
  /** Sequences in the pool. */
  public final long numSequences;
  /** Blocks used by at least one sequence. */
  public final long blocksUsed;
  /** numBlocks - blocksUsed. */
  public final long blocksFree;
  /** Blocks used by more than one sequence. */
  public final long blocksShared;
  /** Sum of the sequences' lengths (a shared token counts once per user). */
  public final long tokensHeld;
  /** Filled rows of the used blocks (a shared row counts once). */
  public final long tokensStored;
  /** blocksUsed / numBlocks. */
  public final double utilization;
  /** Unfilled rows of the used blocks / (blocksUsed * blockSize); 0 when no block is used. */
  public final double internalFragmentation;

  BlockPoolStats(long numBlocks, int blockSize, long numSequences, long blocksUsed, long blocksFree,
      long blocksShared, long tokensHeld, long tokensStored, double utilization,
      double internalFragmentation) {
    this.numBlocks = numBlocks;
    this.blockSize = blockSize;
    this.numSequences = numSequences;
    this.blocksUsed = blocksUsed;
    this.blocksFree = blocksFree;
    this.blocksShared = blocksShared;
    this.tokensHeld = tokensHeld;
    this.tokensStored = tokensStored;
    this.utilization = utilization;
    this.internalFragmentation = internalFragmentation;
  }

  @Override
  public String toString() {
    return String.format("%d/%d blocks used (%d shared), %d sequences, %d tokens held, %d stored",
        blocksUsed, numBlocks, blocksShared, numSequences, tokensHeld, tokensStored);
  }
}
