package org.attnrt;

/**
 * attnrt for Java: library facts and names of codes. The API is {@link AttnrtRuntime} (discovery;
 * options through {@link AttnrtRuntime#builder()}), the ops {@link GqaOp}, {@link PagedGqaOp},
 * {@link SparseMlaOp} and {@link SparseMlaMetadataOp} (made from {@link GqaAttributes},
 * {@link PagedGqaAttributes}, {@link SparseMlaAttributes}), {@link Plan} (a kernel chosen for
 * shapes; {@link Workspace} for runs without allocation), {@link Tensors} (direct buffers by
 * position), {@link BlockPool} (blocks of a paged KV cache) and {@link SparseMlaEncoder} (KV token
 * formats); every handle is {@link AutoCloseable}, and every failing call throws
 * {@link AttnrtException}. See docs/java.md.
 *
 * <pre>{@code
 * try (AttnrtRuntime rt = new AttnrtRuntime();
 *      GqaAttributes a = GqaAttributes.of(32, 8);
 *      GqaOp op = new GqaOp(rt, a);
 *      Tensors in = op.inputs();
 *      Tensors out = op.outputs()) {
 *   in.set(GqaInput.QUERY, query, DType.FLOAT32, 1, 1, 4096);   // ... key, value, past, seqlens_k, total
 *   out.set(GqaOutput.OUTPUT, output, DType.FLOAT32, 1, 1, 4096);  // ... present_key, present_value
 *   try (Plan plan = op.plan(in, out)) {
 *     plan.run(in, out);
 *   }
 * }
 * }</pre>
 */
public final class Attnrt {
  private Attnrt() {}

  /** Library version "MAJOR.MINOR.PATCH". */
  public static String version() {
    return attnrt_c.version();
  }

  /** ABI major version of the library. */
  public static int abiVersionMajor() {
    return attnrt_c.abi_version_major();
  }

  /** ABI minor version of the library. */
  public static int abiVersionMinor() {
    return attnrt_c.abi_version_minor();
  }

  /** Stable name of a status code, e.g. "ATTNRT_ERROR_INVALID_ARGUMENT". */
  public static String statusName(int status) {
    return attnrt_c.status_name(status);
  }

  /** Name of an attnrt_candidate_status, e.g. "declined". */
  public static String candidateStatusName(int status) {
    return attnrt_c.candidate_status_name(status);
  }

  /**
   * The reference op's name of an input, e.g. "query" or "key_cache".
   *
   * @param kind the op kind
   * @param index the input position
   * @return the name, "" when out of range
   */
  public static String opInputName(OpKind kind, long index) {
    return attnrt_c.op_input_name(kind.swigValue(), index);
  }

  /**
   * The reference op's name of an output, e.g. "output" or "attn_out".
   *
   * @param kind the op kind
   * @param index the output position
   * @return the name, "" when out of range
   */
  public static String opOutputName(OpKind kind, long index) {
    return attnrt_c.op_output_name(kind.swigValue(), index);
  }

  /** Short op name, e.g. "gqa". */
  public static String opKindName(int kind) {
    return attnrt_c.op_kind_name(kind);
  }

  /** Short dtype name ("float32", "bfloat16", "int4", ...). */
  public static String dtypeName(DType dtype) {
    return attnrt_c.dtype_name(dtype.code(), dtype.bits());
  }
}
