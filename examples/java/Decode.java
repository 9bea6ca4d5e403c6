import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Random;
import org.attnrt.Attnrt;
import org.attnrt.AttnrtRuntime;
import org.attnrt.DType;
import org.attnrt.GqaAttributes;
import org.attnrt.GqaInput;
import org.attnrt.GqaOutput;
import org.attnrt.GqaOp;
import org.attnrt.Plan;
import org.attnrt.Tensors;

/**
 * One Llama-3-8B attention layer through attnrt from Java: a prompt, then decode steps.
 *
 * <p>GroupQueryAttention with num_heads 32, kv_num_heads 8, head_size 128, float32, on a shared
 * past/present KV buffer in direct buffers updated in place, so the decode loop plans once.
 *
 * <pre>
 * java -Djava.library.path=build/lib -cp build/bindings/attnrt.jar:build/examples/attnrt-examples.jar \
 *     Decode --prompt 512 --steps 16
 * </pre>
 */
public final class Decode {
  static final int NUM_HEADS = 32;
  static final int KV_NUM_HEADS = 8;
  static final int HEAD_SIZE = 128;

  private Decode() {}

  static FloatBuffer floats(long count) {
    return ByteBuffer.allocateDirect(Math.toIntExact(count * 4)).order(ByteOrder.nativeOrder())
        .asFloatBuffer();
  }

  static FloatBuffer tokens(Random rng, int count, int heads) {
    FloatBuffer b = floats((long) count * heads * HEAD_SIZE);
    for (int i = 0; i < b.capacity(); ++i) {
      b.put(i, (float) rng.nextGaussian());
    }
    return b;
  }

  static IntBuffer ints(int value) {
    IntBuffer b = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).asIntBuffer();
    b.put(0, value);
    return b;
  }

  public static void main(String[] args) {
    int prompt = 512;
    int steps = 16;
    int threads = 0;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--prompt": prompt = Integer.parseInt(args[i + 1]); break;
        case "--steps": steps = Integer.parseInt(args[i + 1]); break;
        case "--threads": threads = Integer.parseInt(args[i + 1]); break;
        default: throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    int capacity = prompt + steps;
    Random rng = new Random(0);
    // The shared KV buffer (B, Nkv, capacity, H): past and present are the same memory.
    FloatBuffer cacheK = floats((long) KV_NUM_HEADS * capacity * HEAD_SIZE);
    FloatBuffer cacheV = floats((long) KV_NUM_HEADS * capacity * HEAD_SIZE);
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(threads).build();
        GqaAttributes attributes = GqaAttributes.of(NUM_HEADS, KV_NUM_HEADS);
        GqaOp op = new GqaOp(rt, attributes);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      System.out.printf("attnrt %s, %d threads; Llama-3-8B layer: N=%d Nkv=%d H=%d, KV buffer %d rows%n",
          Attnrt.version(), rt.numThreads(), NUM_HEADS, KV_NUM_HEADS, HEAD_SIZE, capacity);
      in.set(GqaInput.PAST_KEY, cacheK, DType.FLOAT32, 1, KV_NUM_HEADS, capacity, HEAD_SIZE)
          .set(GqaInput.PAST_VALUE, cacheV, DType.FLOAT32, 1, KV_NUM_HEADS, capacity, HEAD_SIZE);
      out.set(GqaOutput.PRESENT_KEY, cacheK, DType.FLOAT32, 1, KV_NUM_HEADS, capacity, HEAD_SIZE)
          .set(GqaOutput.PRESENT_VALUE, cacheV, DType.FLOAT32, 1, KV_NUM_HEADS, capacity, HEAD_SIZE);
      double decodeSeconds = 0;
      double minStep = Double.MAX_VALUE;
      String kernel = "";
      for (int step = 0; step <= steps; ++step) {
        int seqLen = step == 0 ? prompt : 1;
        int total = prompt + step;
        FloatBuffer output = floats((long) seqLen * NUM_HEADS * HEAD_SIZE);
        in.set(GqaInput.QUERY, tokens(rng, seqLen, NUM_HEADS), DType.FLOAT32, 1, seqLen,
                NUM_HEADS * HEAD_SIZE)
            .set(GqaInput.KEY, tokens(rng, seqLen, KV_NUM_HEADS), DType.FLOAT32, 1, seqLen,
                KV_NUM_HEADS * HEAD_SIZE)
            .set(GqaInput.VALUE, tokens(rng, seqLen, KV_NUM_HEADS), DType.FLOAT32, 1, seqLen,
                KV_NUM_HEADS * HEAD_SIZE)
            .set(GqaInput.SEQLENS_K, ints(total - 1), DType.INT32, 1)
            .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1);
        out.set(GqaOutput.OUTPUT, output, DType.FLOAT32, 1, seqLen, NUM_HEADS * HEAD_SIZE);
        try (Plan plan = op.plan(in, out)) {
          long started = System.nanoTime();
          plan.run(in, out);
          double seconds = (System.nanoTime() - started) / 1e9;
          kernel = plan.kernel();
          if (step == 0) {
            System.out.printf("prompt  %5d tokens  %9.2f ms  (%,.0f tokens/s)  kernel %s%n", prompt,
                seconds * 1e3, prompt / seconds, kernel);
          } else {
            decodeSeconds += seconds;
            minStep = Math.min(minStep, seconds);
          }
        }
        if (!Float.isFinite(output.get(0))) {
          throw new IllegalStateException("non-finite output at step " + step);
        }
      }
      if (steps > 0) {
        double mean = decodeSeconds / steps;
        System.out.printf("decode  %5d steps   %9.3f ms/step mean, %.3f min  (%,.0f steps/s)  kernel %s%n",
            steps, mean * 1e3, minStep * 1e3, 1 / mean, kernel);
      }
      System.out.printf("plan cache: %d plans made, %d reused%n", op.planCacheMisses(),
          op.planCacheHits());
    }
  }
}
