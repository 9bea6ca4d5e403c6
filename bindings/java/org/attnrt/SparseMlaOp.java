package org.attnrt;

/**
 * Sparse MLA, CANN's MixedQuantSparseFlashMla (attnrt/ops/sparse_mla.h): each query head attends
 * with one online softmax over an original-KV window followed by compressed keys; K = V, a
 * 512-value token (448 nope + 64 rope) dequantized on the fly. Scenario by presence: SWA = ori_kv
 * only, CSA = ori_kv + cmp_kv + cmp_sparse_indices, HCA = ori_kv + cmp_kv. Tokens come from
 * {@link SparseMlaEncoder}; the {@code metadata} input from {@link SparseMlaMetadataOp} made with
 * the same attributes and inputs.
 */
public class SparseMlaOp extends Op {
  /**
   * Creates the op from validated attributes.
   *
   * @param runtime the runtime whose kernels run it
   * @param attributes quant mode, layouts, masks, ... (copied)
   * @throws AttnrtException INVALID_ARGUMENT naming the attribute with the expected and actual
   *     values
   */
  public SparseMlaOp(AttnrtRuntime runtime, SparseMlaAttributes attributes) {
    super(runtime, attributes, false);
  }

  /**
   * An empty list of the op's 18 input positions ({@link SparseMlaInput}).
   *
   * @return a new list, to be closed
   */
  public Tensors inputs() {
    return Tensors.sparseMlaInputs();
  }

  /**
   * An empty list of the op's 2 output positions ({@link SparseMlaOutput}).
   *
   * @return a new list, to be closed
   */
  public Tensors outputs() {
    return Tensors.sparseMlaOutputs();
  }
}
