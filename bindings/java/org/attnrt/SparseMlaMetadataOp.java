package org.attnrt;

import java.nio.IntBuffer;

/**
 * CANN's MixedQuantSparseFlashMlaMetadata: the {@link SparseMlaOp}'s int32 [2048] work partition
 * for the same attributes and inputs (metadata absent), computed by the core.
 */
public class SparseMlaMetadataOp extends Op {
  /** Words of the metadata array (2048). */
  public static final int METADATA_SIZE = 2048;

  /**
   * Creates the metadata op from the attributes the main op is made with.
   *
   * @param runtime the runtime
   * @param attributes the main op's attributes (copied)
   * @throws AttnrtException INVALID_ARGUMENT naming the attribute with the expected and actual
   *     values
   */
  public SparseMlaMetadataOp(AttnrtRuntime runtime, SparseMlaAttributes attributes) {
    super(runtime, attributes, true);
  }

  /**
   * An empty list of the op's 18 input positions ({@link SparseMlaInput}; metadata stays empty).
   *
   * @return a new list, to be closed
   */
  public Tensors inputs() {
    return Tensors.sparseMlaInputs();
  }

  /**
   * An empty list of the op's one output position (the metadata).
   *
   * @return a new list, to be closed
   */
  public Tensors outputs() {
    return new Tensors(1);
  }

  /**
   * Plans and runs the op on {@code inputs} (the main op's, without metadata).
   *
   * @param inputs the main op's inputs
   * @return the metadata, a new direct int32 buffer of {@link #METADATA_SIZE} values, to be set
   *     at {@link SparseMlaInput#METADATA}
   * @throws AttnrtException as the main op would for these inputs
   */
  public IntBuffer compute(Tensors inputs) {
    IntBuffer metadata = BlockTable.ints(METADATA_SIZE);
    try (Tensors out = outputs()) {
      out.setNamed(0, "metadata", metadata, DType.INT32, METADATA_SIZE);
      try (Plan plan = plan(inputs, out)) {
        plan.run(inputs, out);
      }
    }
    return metadata;
  }
}
