package org.attnrt;

import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.junit.Test;

/** 10,000 create/plan/run/destroy cycles keep the resident set flat. */
public class LeakTest {
  static final int N = 4;
  static final int NKV = 2;
  static final int H = 16;
  static final int S = 8;

  static FloatBuffer floats(int count) {
    return ByteBuffer.allocateDirect(count * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }

  static IntBuffer ints(int value) {
    IntBuffer b = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).asIntBuffer();
    b.put(0, value);
    return b;
  }

  static double rssMib() throws Exception {
    for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
      if (line.startsWith("VmRSS:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
      }
    }
    throw new IllegalStateException("no VmRSS in /proc/self/status");
  }

  final FloatBuffer q = floats(S * N * H);
  final FloatBuffer k = floats(S * NKV * H);
  final FloatBuffer v = floats(S * NKV * H);
  final FloatBuffer o = floats(S * N * H);
  final FloatBuffer pk = floats(NKV * S * H);
  final FloatBuffer pv = floats(NKV * S * H);
  final IntBuffer seqlens = ints(S - 1);
  final IntBuffer total = ints(S);

  void cycle() {
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(1).build();
        GqaAttributes a = GqaAttributes.of(N, NKV);
        Op op = new Op(rt, a);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      in.set(GqaInput.QUERY, q, DType.FLOAT32, 1, S, N * H)
          .set(GqaInput.KEY, k, DType.FLOAT32, 1, S, NKV * H)
          .set(GqaInput.VALUE, v, DType.FLOAT32, 1, S, NKV * H)
          .set(GqaInput.SEQLENS_K, seqlens, DType.INT32, 1)
          .set(GqaInput.TOTAL_SEQUENCE_LENGTH, total, DType.INT32, 1);
      out.set(GqaOutput.OUTPUT, o, DType.FLOAT32, 1, S, N * H)
          .set(GqaOutput.PRESENT_KEY, pk, DType.FLOAT32, 1, NKV, S, H)
          .set(GqaOutput.PRESENT_VALUE, pv, DType.FLOAT32, 1, NKV, S, H);
      try (Plan plan = op.plan(in, out)) {
        plan.run(in, out);
        plan.kernel();
      }
      op.explain(in, out);
      rt.plugins();
    }
  }

  @Test
  public void rssStaysFlatOver10000Cycles() throws Exception {
    for (int i = 0; i < 1000; ++i) {
      cycle();
    }
    System.gc();
    double after1000 = rssMib();
    for (int i = 0; i < 9000; ++i) {
      cycle();
    }
    System.gc();
    double after10000 = rssMib();
    System.out.printf("java RSS after 1,000 cycles: %.1f MiB; after 10,000: %.1f MiB; growth %+.2f MiB%n",
        after1000, after10000, after10000 - after1000);
    assertTrue("RSS grew by " + (after10000 - after1000) + " MiB", after10000 - after1000 < 4.0);
  }
}
