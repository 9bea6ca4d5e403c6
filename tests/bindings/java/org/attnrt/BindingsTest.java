package org.attnrt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.List;
import java.util.Random;
import org.junit.Test;

/** The Java binding: handles, data from plugins/explain, direct buffers without copies, errors. */
public class BindingsTest {
  static final int N = 4;
  static final int NKV = 2;
  static final int H = 16;

  static FloatBuffer floats(int count) {
    return ByteBuffer.allocateDirect(count * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }

  static IntBuffer ints(int... values) {
    IntBuffer b = ByteBuffer.allocateDirect(values.length * 4).order(ByteOrder.nativeOrder()).asIntBuffer();
    b.put(values).rewind();
    return b;
  }

  static FloatBuffer random(Random rng, int count) {
    FloatBuffer b = floats(count);
    for (int i = 0; i < count; ++i) {
      b.put(i, (float) rng.nextGaussian());
    }
    return b;
  }

  /** Causal GQA of query row s against keys [0, total - S + s], caches BNSH with `capacity` rows. */
  static double[] reference(FloatBuffer q, FloatBuffer kCache, FloatBuffer vCache, int s, int seqLen,
      int total, int capacity) {
    double[] out = new double[N * H];
    int group = N / NKV;
    for (int n = 0; n < N; ++n) {
      int kvh = n / group;
      int last = total - seqLen + s;
      double[] scores = new double[last + 1];
      double max = Double.NEGATIVE_INFINITY;
      for (int t = 0; t <= last; ++t) {
        double dot = 0;
        for (int d = 0; d < H; ++d) {
          dot += q.get(s * N * H + n * H + d) * kCache.get((kvh * capacity + t) * H + d);
        }
        scores[t] = dot / Math.sqrt(H);
        max = Math.max(max, scores[t]);
      }
      double sum = 0;
      for (int t = 0; t <= last; ++t) {
        scores[t] = Math.exp(scores[t] - max);
        sum += scores[t];
      }
      for (int t = 0; t <= last; ++t) {
        for (int d = 0; d < H; ++d) {
          out[n * H + d] += scores[t] / sum * vCache.get((kvh * capacity + t) * H + d);
        }
      }
    }
    return out;
  }

  @Test
  public void versionAndPlugins() {
    assertEquals(1, Attnrt.abiVersionMajor());
    assertFalse(Attnrt.version().isEmpty());
    try (AttnrtRuntime rt = new AttnrtRuntime()) {
      assertTrue(rt.numThreads() >= 1);
      List<PluginInfo> plugins = rt.plugins();
      PluginInfo cpu = plugins.stream().filter(p -> p.name.equals("cpu_x86")).findFirst().get();
      assertTrue(cpu.available);
      assertTrue(cpu.facts.containsKey("isa"));
      assertTrue(cpu.kernels.stream().anyMatch(k -> k.name.equals("cpu_x86.gqa.naive.scalar")));
      for (int i = 1; i < cpu.kernels.size(); ++i) {
        assertTrue(cpu.kernels.get(i - 1).priority >= cpu.kernels.get(i).priority);
      }
      assertTrue(rt.diagnostics().isEmpty());
    }
  }

  @Test
  public void promptThenDecodeOnSharedBufferMatchesReference() {
    Random rng = new Random(7);
    int prompt = 8;
    int capacity = 16;
    FloatBuffer kCache = floats(NKV * capacity * H);
    FloatBuffer vCache = floats(NKV * capacity * H);
    try (AttnrtRuntime rt = new AttnrtRuntime();
        GqaAttributes attributes = GqaAttributes.of(N, NKV);
        Op op = new Op(rt, attributes);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      for (int step = 0; step <= 4; ++step) {
        int seqLen = step == 0 ? prompt : 1;
        int total = prompt + step;
        FloatBuffer q = random(rng, seqLen * N * H);
        FloatBuffer k = random(rng, seqLen * NKV * H);
        FloatBuffer v = random(rng, seqLen * NKV * H);
        FloatBuffer o = floats(seqLen * N * H);
        in.set(GqaInput.QUERY, q, DType.FLOAT32, 1, seqLen, N * H)
            .set(GqaInput.KEY, k, DType.FLOAT32, 1, seqLen, NKV * H)
            .set(GqaInput.VALUE, v, DType.FLOAT32, 1, seqLen, NKV * H)
            .set(GqaInput.PAST_KEY, kCache, DType.FLOAT32, 1, NKV, capacity, H)
            .set(GqaInput.PAST_VALUE, vCache, DType.FLOAT32, 1, NKV, capacity, H)
            .set(GqaInput.SEQLENS_K, ints(total - 1), DType.INT32, 1)
            .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1);
        out.set(GqaOutput.OUTPUT, o, DType.FLOAT32, 1, seqLen, N * H)
            .set(GqaOutput.PRESENT_KEY, kCache, DType.FLOAT32, 1, NKV, capacity, H)
            .set(GqaOutput.PRESENT_VALUE, vCache, DType.FLOAT32, 1, NKV, capacity, H);
        try (Plan plan = op.plan(in, out)) {
          assertTrue(plan.kernel().startsWith("cpu_x86.gqa."));
          assertNotNull(plan.signature());
          plan.run(in, out);
        }
        // The new key row landed in the shared cache at its position (head 1, last row).
        assertEquals(k.get((seqLen - 1) * NKV * H + H + 3),
            kCache.get((capacity + total - 1) * H + 3), 0f);
        for (int s = 0; s < seqLen; ++s) {
          double[] expected = reference(q, kCache, vCache, s, seqLen, total, capacity);
          for (int i = 0; i < N * H; ++i) {
            assertEquals(expected[i], o.get(s * N * H + i), 1e-4);
          }
        }
      }
      assertEquals(2, op.planCacheMisses());
      assertEquals(3, op.planCacheHits());
    }
  }

  @Test
  public void positionIsTheByteOffset() {
    Random rng = new Random(3);
    FloatBuffer big = random(rng, 8 + N * H);
    FloatBuffer k = random(rng, NKV * H);
    try (AttnrtRuntime rt = new AttnrtRuntime();
        GqaAttributes a = GqaAttributes.of(N, NKV);
        Op op = new Op(rt, a);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      FloatBuffer q = big.duplicate();
      q.position(8);
      FloatBuffer o = floats(N * H);
      in.set(GqaInput.QUERY, q, DType.FLOAT32, 1, 1, N * H)
          .set(GqaInput.KEY, k, DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.VALUE, k, DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.SEQLENS_K, ints(0), DType.INT32, 1)
          .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(1), DType.INT32, 1);
      out.set(GqaOutput.OUTPUT, o, DType.FLOAT32, 1, 1, N * H)
          .set(GqaOutput.PRESENT_KEY, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H)
          .set(GqaOutput.PRESENT_VALUE, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H);
      try (Plan plan = op.plan(in, out)) {
        plan.run(in, out);
      }
      // One key: the output of head n is the value row of its kv head.
      float[] got = new float[H];
      float[] want = new float[H];
      for (int d = 0; d < H; ++d) {
        got[d] = o.get(3 * H + d);
        want[d] = k.get(H + d);
      }
      assertArrayEquals(want, got, 1e-6f);
    }
  }

  @Test
  public void explainListsEveryKernel() {
    try (AttnrtRuntime rt = AttnrtRuntime.builder().disable("*avx2*").build();
        GqaAttributes a = GqaAttributes.of(N, NKV);
        Op op = new Op(rt, a);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      in.set(GqaInput.QUERY, floats(N * H), DType.FLOAT32, 1, 1, N * H)
          .set(GqaInput.KEY, floats(NKV * H), DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.VALUE, floats(NKV * H), DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.SEQLENS_K, ints(0), DType.INT32, 1)
          .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(1), DType.INT32, 1);
      out.set(GqaOutput.OUTPUT, floats(N * H), DType.FLOAT32, 1, 1, N * H)
          .set(GqaOutput.PRESENT_KEY, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H)
          .set(GqaOutput.PRESENT_VALUE, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H);
      List<Candidate> candidates = op.explain(in, out);
      assertEquals("selected", candidates.stream().filter(c -> c.status.equals("selected"))
          .findFirst().get().status);
      for (Candidate c : candidates) {
        if (c.kernel.contains("avx2")) {
          assertEquals("disabled", c.status);
        }
      }
    }
  }

  static AttnrtException expectFailure(Runnable call) {
    try {
      call.run();
    } catch (AttnrtException e) {
      return e;
    }
    fail("expected an AttnrtException");
    return null;
  }

  @Test
  public void failuresThrowWithStatusAndMessage() {
    try (AttnrtRuntime rt = new AttnrtRuntime(); GqaAttributes bad = GqaAttributes.of(6, 4)) {
      AttnrtException e = expectFailure(() -> new Op(rt, bad).close());
      assertEquals(Status.ERROR_INVALID_ARGUMENT, e.getStatus());
      assertEquals("ATTNRT_ERROR_INVALID_ARGUMENT", e.getStatusName());
      assertTrue(e.getDetail(), e.getDetail().contains("kv_num_heads"));
      assertTrue(e.getMessage().startsWith("ATTNRT_ERROR_INVALID_ARGUMENT: "));
    }
    try (AttnrtRuntime rt = AttnrtRuntime.builder().kernel("no-such-kernel*").build();
        GqaAttributes a = GqaAttributes.of(N, NKV);
        Op op = new Op(rt, a);
        Tensors in = Tensors.gqaInputs();
        Tensors out = Tensors.gqaOutputs()) {
      in.set(GqaInput.QUERY, floats(N * H), DType.FLOAT32, 1, 1, N * H)
          .set(GqaInput.KEY, floats(NKV * H), DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.VALUE, floats(NKV * H), DType.FLOAT32, 1, 1, NKV * H)
          .set(GqaInput.SEQLENS_K, ints(0), DType.INT32, 1)
          .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(1), DType.INT32, 1);
      out.set(GqaOutput.OUTPUT, floats(N * H), DType.FLOAT32, 1, 1, N * H)
          .set(GqaOutput.PRESENT_KEY, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H)
          .set(GqaOutput.PRESENT_VALUE, floats(NKV * H), DType.FLOAT32, 1, NKV, 1, H);
      AttnrtException e = expectFailure(() -> op.plan(in, out).close());
      assertEquals(Status.ERROR_UNSUPPORTED, e.getStatus());
      assertTrue(e.getDetail().contains("cpu_x86.gqa.naive.scalar"));
    }
  }

  @Test
  public void buffersAreChecked() {
    try (Tensors in = Tensors.gqaInputs()) {
      AttnrtException e = expectFailure(() -> in.set(GqaInput.QUERY,
          FloatBuffer.allocate(64), DType.FLOAT32, 1, 1, 64));
      assertTrue(e.getDetail(), e.getDetail().startsWith("query: the buffer is not direct"));
      e = expectFailure(() -> in.set(GqaInput.QUERY,
          ByteBuffer.allocateDirect(256).asFloatBuffer(), DType.FLOAT32, 1, 1, 64));
      assertTrue(e.getDetail(), e.getDetail().contains("nativeOrder")
          || ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN);
      e = expectFailure(() -> in.set(GqaInput.QUERY, floats(63), DType.FLOAT32, 1, 1, 64));
      assertTrue(e.getDetail(), e.getDetail().contains("needs 256 bytes"));
      e = expectFailure(() -> in.set(GqaInput.QUERY, floats(64), DType.FLOAT16, 1, 1, 64));
      assertTrue(e.getDetail(), e.getDetail().contains("32-bit"));
      e = expectFailure(() -> in.set(99, floats(64), DType.FLOAT32, 64));
      assertTrue(e.getDetail(), e.getDetail().contains("out of range"));
      in.set(GqaInput.QUERY, floats(64), DType.FLOAT32, 1, 1, 64);
      assertTrue(in.has(GqaInput.QUERY.swigValue()));
      in.clear(GqaInput.QUERY.swigValue());
      assertFalse(in.has(GqaInput.QUERY.swigValue()));
    }
  }

  @Test
  public void closedHandlesThrow() {
    AttnrtRuntime rt = new AttnrtRuntime();
    rt.close();
    rt.close();
    AttnrtException e = expectFailure(() -> rt.numThreads());
    assertTrue(e.getDetail().contains("runtime is closed"));
    try (GqaAttributes a = GqaAttributes.of(N, NKV)) {
      e = expectFailure(() -> new Op(rt, a));
      assertEquals(Status.ERROR_INVALID_ARGUMENT, e.getStatus());
    }
  }
}
