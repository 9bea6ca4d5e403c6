package org.attnrt;

/**
 * GroupQueryAttention over a paged KV cache (attnrt/ops/paged_gqa.h): GQA's math with K and V in
 * two block pools, {@code key_cache} and {@code value_cache} [num_blocks, block_size, Nkv, H]
 * (BSNH) or [num_blocks, Nkv, block_size, H] (BNSH), addressed through {@code block_table} int32
 * [B, max_blocks_per_seq]. A run writes this step's new K/V rows into the pools in place. A
 * {@link BlockPool} hands out the blocks and builds the table.
 */
public class PagedGqaOp extends Op {
  /**
   * Creates the op from validated attributes.
   *
   * @param runtime the runtime whose kernels run it
   * @param attributes GQA attributes, block size and kv layout (copied)
   * @throws AttnrtException INVALID_ARGUMENT naming the attribute with the expected and actual
   *     values (e.g. block_size 0)
   */
  public PagedGqaOp(AttnrtRuntime runtime, PagedGqaAttributes attributes) {
    super(runtime, attributes);
  }

  /**
   * An empty list of the op's 17 input positions ({@link PagedGqaInput}).
   *
   * @return a new list, to be closed
   */
  public Tensors inputs() {
    return Tensors.pagedGqaInputs();
  }

  /**
   * An empty list of the op's 2 output positions ({@link PagedGqaOutput}).
   *
   * @return a new list, to be closed
   */
  public Tensors outputs() {
    return Tensors.pagedGqaOutputs();
  }
}
