// GroupQueryAttention from Java: a 4-token prompt, then one decode step, on a shared KV buffer.
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import org.attnrt.AttnrtRuntime;
import org.attnrt.DType;
import org.attnrt.GqaAttributes;
import org.attnrt.GqaInput;
import org.attnrt.GqaOp;
import org.attnrt.GqaOutput;
import org.attnrt.Plan;
import org.attnrt.Tensors;

public final class GqaQuickstart {
  static final int N = 4;     // query heads
  static final int NKV = 2;   // key/value heads
  static final int H = 16;    // head size
  static final int CAP = 8;   // rows of the KV buffer

  static FloatBuffer floats(int count, float value) {
    FloatBuffer b = ByteBuffer.allocateDirect(count * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    for (int i = 0; i < count; ++i) {
      b.put(i, value * ((i % 7) - 3));
    }
    return b;
  }

  static IntBuffer ints(int value) {
    IntBuffer b = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).asIntBuffer();
    return b.put(0, value);
  }

  public static void main(String[] args) {
    FloatBuffer cacheK = floats(NKV * CAP * H, 0);   // (B, Nkv, CAP, H): past and present
    FloatBuffer cacheV = floats(NKV * CAP * H, 0);
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(2).build();
        GqaAttributes attributes = GqaAttributes.of(N, NKV);
        GqaOp op = new GqaOp(rt, attributes);
        Tensors in = op.inputs();
        Tensors out = op.outputs()) {
      in.set(GqaInput.PAST_KEY, cacheK, DType.FLOAT32, 1, NKV, CAP, H)
          .set(GqaInput.PAST_VALUE, cacheV, DType.FLOAT32, 1, NKV, CAP, H);
      out.set(GqaOutput.PRESENT_KEY, cacheK, DType.FLOAT32, 1, NKV, CAP, H)
          .set(GqaOutput.PRESENT_VALUE, cacheV, DType.FLOAT32, 1, NKV, CAP, H);
      int total = 0;
      for (int seqLen : new int[] {4, 1}) {           // the prompt, then one decode step
        total += seqLen;
        FloatBuffer output = floats(seqLen * N * H, 0);
        in.set(GqaInput.QUERY, floats(seqLen * N * H, 0.1f), DType.FLOAT32, 1, seqLen, N * H)
            .set(GqaInput.KEY, floats(seqLen * NKV * H, 0.2f), DType.FLOAT32, 1, seqLen, NKV * H)
            .set(GqaInput.VALUE, floats(seqLen * NKV * H, 0.3f), DType.FLOAT32, 1, seqLen, NKV * H)
            .set(GqaInput.SEQLENS_K, ints(total - 1), DType.INT32, 1)
            .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1);
        out.set(GqaOutput.OUTPUT, output, DType.FLOAT32, 1, seqLen, N * H);
        try (Plan plan = op.plan(in, out)) {
          plan.run(in, out);
          System.out.printf("%d tokens, total %d: output[0] = %.6f (%s)%n", seqLen, total,
              output.get(0), plan.kernel());
        }
      }
    }
  }
}
