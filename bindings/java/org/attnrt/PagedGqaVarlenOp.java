package org.attnrt;

/**
 * Paged GroupQueryAttention over packed variable-length batches
 * (attnrt/ops/paged_gqa_varlen.h): prefill chunks and single-token decodes of any number of
 * sequences in one call, as a serving engine makes it per layer. The paged op's math and block
 * pools; the query is packed, {@code query} [num_tokens, N*H] with the rows of sequence b at
 * [query_start_loc[b], query_start_loc[b + 1]), and {@code seq_lens} int32 [B] gives each
 * sequence's context length T_b including its new rows. Query row i of sequence b is token
 * T_b - q_len_b + i and sees keys up to itself. The new K/V rows ({@code key}, {@code value}
 * [num_tokens, Nkv*H]) are written into the blocks {@code block_table} names before attention
 * reads them. With do_rotary = 1 (ABI 1.12) query rows and new key rows are rotated with
 * {@code cos_cache}/{@code sin_cache} at their token positions, or at {@code position_ids} and
 * {@code key_position_ids}. Not supported: attention_bias, qk_output.
 */
public class PagedGqaVarlenOp extends Op {
  /**
   * Creates the op from validated attributes.
   *
   * @param runtime the runtime whose kernels run it
   * @param attributes GQA attributes, block size and kv layout (copied); qk_output must be 0
   * @throws AttnrtException INVALID_ARGUMENT naming the attribute with the expected and actual
   *     values
   */
  public PagedGqaVarlenOp(AttnrtRuntime runtime, PagedGqaAttributes attributes) {
    super(runtime, attributes, true);
  }

  /**
   * An empty list of the op's 18 input positions ({@link PagedGqaVarlenInput}).
   *
   * @return a new list, to be closed
   */
  public Tensors inputs() {
    return Tensors.pagedGqaVarlenInputs();
  }

  /**
   * An empty list of the op's one output position ({@link PagedGqaVarlenOutput}).
   *
   * @return a new list, to be closed
   */
  public Tensors outputs() {
    return Tensors.pagedGqaVarlenOutputs();
  }
}
