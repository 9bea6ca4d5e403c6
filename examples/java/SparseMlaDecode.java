// Sparse MLA from Java: one decode row over a window of the original KV and the compressed KV
// (HCA), with tokens from the quant_mode 1 encoder and the metadata from the metadata op.
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.ShortBuffer;
import org.attnrt.AttnrtRuntime;
import org.attnrt.DType;
import org.attnrt.Plan;
import org.attnrt.SparseMlaAttributes;
import org.attnrt.SparseMlaEncoder;
import org.attnrt.SparseMlaInput;
import org.attnrt.SparseMlaMaskMode;
import org.attnrt.SparseMlaMetadataOp;
import org.attnrt.SparseMlaOp;
import org.attnrt.SparseMlaOutput;
import org.attnrt.SparseMlaQuantMode;
import org.attnrt.Tensors;

public final class SparseMlaDecode {
  static final int N = 8;        // query heads
  static final int D = 512;      // head dim: 448 nope + 64 rope
  static final int S2 = 16;      // original KV tokens
  static final int RATIO = 4;    // cmp_ratio: one compressed token per 4 original ones
  static final int C = S2 / RATIO;

  static int seed = 7;

  static float next() {          // deterministic values in [-1, 1)
    seed = seed * 1103515245 + 12345;
    return ((seed >>> 8) & 0xFFFF) / 32768f - 1f;
  }

  static FloatBuffer rows(int count) {
    FloatBuffer b = ByteBuffer.allocateDirect(count * D * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    for (int i = 0; i < count * D; ++i) {
      b.put(i, next());
    }
    return b;
  }

  static short bf16(float x) {   // round to nearest even
    int bits = Float.floatToIntBits(x);
    return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
  }

  public static void main(String[] args) {
    ShortBuffer q = ByteBuffer.allocateDirect(N * D * 2).order(ByteOrder.nativeOrder()).asShortBuffer();
    for (int i = 0; i < N * D; ++i) {
      q.put(i, bf16(next()));
    }
    ByteBuffer oriKv = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE1, rows(S2));   // S2 x 608
    ByteBuffer cmpKv = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE1, rows(C));    // C x 608
    ShortBuffer attnOut = ByteBuffer.allocateDirect(N * D * 2).order(ByteOrder.nativeOrder()).asShortBuffer();

    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(2).build();
        SparseMlaAttributes attributes = SparseMlaAttributes.of(SparseMlaQuantMode.MODE1)) {
      attributes.setCmpRatio(RATIO);
      attributes.setOriMaskMode(SparseMlaMaskMode.SLIDING_WINDOW);
      attributes.setOriWinLeft(7);
      attributes.setOriWinRight(0);
      attributes.setCmpMaskMode(SparseMlaMaskMode.RIGHT_DOWN_CAUSAL);
      try (SparseMlaMetadataOp metadataOp = new SparseMlaMetadataOp(rt, attributes);
          SparseMlaOp op = new SparseMlaOp(rt, attributes);
          Tensors in = op.inputs();
          Tensors out = op.outputs()) {
        in.set(SparseMlaInput.Q, q, DType.BFLOAT16, 1, 1, N, D)                 // BSND
            .set(SparseMlaInput.ORI_KV, oriKv, DType.UINT8, 1, S2, 1, 608)
            .set(SparseMlaInput.CMP_KV, cmpKv, DType.UINT8, 1, C, 1, 608);
        IntBuffer metadata = metadataOp.compute(in);                            // int32 [2048]
        in.set(SparseMlaInput.METADATA, metadata, DType.INT32, SparseMlaMetadataOp.METADATA_SIZE);
        out.set(SparseMlaOutput.ATTN_OUT, attnOut, DType.BFLOAT16, 1, 1, N, D);
        try (Plan plan = op.plan(in, out)) {
          plan.run(in, out);
          float first = Float.intBitsToFloat(attnOut.get(0) << 16);
          System.out.printf("sparse MLA decode: %d heads over %d + %d keys, attn_out[0] = %.6f (%s)%n",
              N, 8, C, first, plan.kernel());
        }
      }
    }
  }
}
