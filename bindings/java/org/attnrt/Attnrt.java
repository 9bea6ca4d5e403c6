package org.attnrt;

/**
 * attnrt for Java: library facts and names of codes. The API is {@link Runtime} (discovery),
 * {@link Op} (an op from {@link GqaAttributes}), {@link Plan} (a kernel chosen for shapes) and
 * {@link Tensors} (direct buffers by position); every one is {@link AutoCloseable}, and every failing
 * call throws {@link AttnrtException}.
 *
 * <pre>{@code
 * try (Runtime rt = new Runtime();
 *      GqaAttributes a = GqaAttributes.of(32, 8);
 *      Op op = new Op(rt, a);
 *      Tensors in = Tensors.gqaInputs();
 *      Tensors out = Tensors.gqaOutputs()) {
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

  /** Short op name, e.g. "gqa". */
  public static String opKindName(int kind) {
    return attnrt_c.op_kind_name(kind);
  }

  /** Short dtype name ("float32", "bfloat16", "int4", ...). */
  public static String dtypeName(DType dtype) {
    return attnrt_c.dtype_name(dtype.code(), dtype.bits());
  }
}
