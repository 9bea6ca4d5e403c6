package org.attnrt;

/**
 * com.microsoft.GroupQueryAttention (ONNX Runtime): inputs at {@link GqaInput} positions, outputs
 * at {@link GqaOutput} positions (attnrt/ops/gqa.h).
 */
public class GqaOp extends Op {
  /**
   * Creates the op from validated attributes.
   *
   * @param runtime the runtime whose kernels run it
   * @param attributes head counts and the other attributes (copied)
   * @throws AttnrtException INVALID_ARGUMENT naming the attribute with the expected and actual
   *     values
   */
  public GqaOp(AttnrtRuntime runtime, GqaAttributes attributes) {
    super(runtime, attributes);
  }

  /**
   * An empty list of the op's 16 input positions.
   *
   * @return a new list, to be closed
   */
  public Tensors inputs() {
    return Tensors.gqaInputs();
  }

  /**
   * An empty list of the op's 4 output positions.
   *
   * @return a new list, to be closed
   */
  public Tensors outputs() {
    return Tensors.gqaOutputs();
  }
}
