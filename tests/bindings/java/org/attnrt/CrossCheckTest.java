package org.attnrt;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assume.assumeTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.ShortBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * Every op through Java equals the same plan run from C, bitwise: crosscheck.c (the system property
 * attnrt.crosscheck names its executable) writes its outputs for seeded inputs; this test makes the
 * same inputs with the same generator, runs them through the Java binding and compares the bytes.
 */
public class CrossCheckTest {
  static Path reference;

  @BeforeClass
  public static void runC() throws Exception {
    String exe = System.getProperty("attnrt.crosscheck");
    assumeTrue("-Dattnrt.crosscheck=<attnrt_java_crosscheck> not given", exe != null);
    reference = Files.createTempDirectory("attnrt-crosscheck");
    Process p = new ProcessBuilder(exe, reference.toString()).inheritIO().start();
    assertEquals("crosscheck exit status", 0, p.waitFor());
  }

  @AfterClass
  public static void removeFiles() throws Exception {
    if (reference != null) {
      for (String name : new String[] {"paged_gqa.bin", "sparse_mla.bin"}) {
        Files.deleteIfExists(reference.resolve(name));
      }
      Files.deleteIfExists(reference);
    }
  }

  // The generator of crosscheck.c: an LCG modulo 2^32 (Java's int arithmetic wraps the same way).
  static int seed;

  static float next() {
    seed = seed * 1103515245 + 12345;
    return ((seed >>> 8) & 0xFFFF) / 32768f - 1f;
  }

  static ByteBuffer bytes(int count) {
    return ByteBuffer.allocateDirect(count).order(ByteOrder.nativeOrder());
  }

  static FloatBuffer random(int count) {
    FloatBuffer b = bytes(count * 4).asFloatBuffer();
    for (int i = 0; i < count; ++i) {
      b.put(i, next());
    }
    return b;
  }

  static short bf16(float x) {
    int bits = Float.floatToIntBits(x);
    return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
  }

  static IntBuffer ints(int value) {
    return bytes(4).asIntBuffer().put(0, value);
  }

  static byte[] contents(ByteBuffer b) {
    byte[] out = new byte[b.capacity()];
    b.duplicate().clear().get(out);
    return out;
  }

  static final int N = 4, NKV = 2, H = 16, BLOCK = 4, NUM_BLOCKS = 8, MAX_BLOCKS = 4, PROMPT = 6,
      STEPS = 2;

  @Test
  public void pagedGqaEqualsC() throws Exception {
    int poolFloats = NUM_BLOCKS * BLOCK * NKV * H;
    int outFloats = (PROMPT + STEPS) * N * H;
    ByteBuffer all = bytes((outFloats + 2 * poolFloats) * 4);
    ByteBuffer outputs = all.duplicate().position(0).limit(outFloats * 4).slice()
        .order(ByteOrder.nativeOrder());
    ByteBuffer keyCache = all.duplicate().position(outFloats * 4).limit((outFloats + poolFloats) * 4)
        .slice().order(ByteOrder.nativeOrder());
    ByteBuffer valueCache = all.duplicate().position((outFloats + poolFloats) * 4).slice()
        .order(ByteOrder.nativeOrder());
    seed = 11;
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(2).build();
        PagedGqaAttributes a = PagedGqaAttributes.of(N, NKV, BLOCK);
        PagedGqaOp op = new PagedGqaOp(rt, a);
        BlockPool pool = new BlockPool(NUM_BLOCKS, BLOCK);
        Tensors in = op.inputs();
        Tensors out = op.outputs()) {
      long seq = pool.addSequence();
      int done = 0;
      for (int step = 0; step <= STEPS; ++step) {
        int s = step == 0 ? PROMPT : 1;
        FloatBuffer q = random(s * N * H);
        FloatBuffer k = random(s * NKV * H);
        FloatBuffer v = random(s * NKV * H);
        pool.append(seq, s);
        BlockTable table = pool.blockTable(new long[] {seq}, MAX_BLOCKS);
        FloatBuffer o = outputs.asFloatBuffer();
        o.position(done);
        in.set(PagedGqaInput.QUERY, q, DType.FLOAT32, 1, s, N * H)
            .set(PagedGqaInput.KEY, k, DType.FLOAT32, 1, s, NKV * H)
            .set(PagedGqaInput.VALUE, v, DType.FLOAT32, 1, s, NKV * H)
            .set(PagedGqaInput.KEY_CACHE, keyCache, DType.FLOAT32, NUM_BLOCKS, BLOCK, NKV, H)
            .set(PagedGqaInput.VALUE_CACHE, valueCache, DType.FLOAT32, NUM_BLOCKS, BLOCK, NKV, H)
            .set(PagedGqaInput.SEQLENS_K, table.seqlensK, DType.INT32, 1)
            .set(PagedGqaInput.TOTAL_SEQUENCE_LENGTH, ints(table.seqlensK.get(0) + 1), DType.INT32, 1)
            .set(PagedGqaInput.BLOCK_TABLE, table.table, DType.INT32, 1, MAX_BLOCKS);
        out.set(PagedGqaOutput.OUTPUT, o, DType.FLOAT32, 1, s, N * H);
        try (Plan plan = op.plan(in, out)) {
          plan.run(in, out);
        }
        done += s * N * H;
      }
    }
    byte[] expected = Files.readAllBytes(reference.resolve("paged_gqa.bin"));
    assertArrayEquals(expected, contents(all));
  }

  static final int MN = 8, D = 512, S2 = 16, RATIO = 4, C = S2 / RATIO;

  @Test
  public void sparseMlaEqualsC() throws Exception {
    seed = 7;
    ShortBuffer q = bytes(MN * D * 2).asShortBuffer();
    for (int i = 0; i < MN * D; ++i) {
      q.put(i, bf16(next()));
    }
    ByteBuffer oriKv = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE1, random(S2 * D));
    ByteBuffer cmpKv = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE1, random(C * D));
    ByteBuffer attnOut = bytes(MN * D * 2);
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(2).build();
        SparseMlaAttributes a = SparseMlaAttributes.of(SparseMlaQuantMode.MODE1)) {
      a.setCmpRatio(RATIO);
      a.setOriMaskMode(SparseMlaMaskMode.SLIDING_WINDOW);
      a.setOriWinLeft(7);
      a.setOriWinRight(0);
      a.setCmpMaskMode(SparseMlaMaskMode.RIGHT_DOWN_CAUSAL);
      try (SparseMlaMetadataOp meta = new SparseMlaMetadataOp(rt, a);
          SparseMlaOp op = new SparseMlaOp(rt, a);
          Tensors in = op.inputs();
          Tensors out = op.outputs()) {
        in.set(SparseMlaInput.Q, q, DType.BFLOAT16, 1, 1, MN, D)
            .set(SparseMlaInput.ORI_KV, oriKv, DType.UINT8, 1, S2, 1, 608)
            .set(SparseMlaInput.CMP_KV, cmpKv, DType.UINT8, 1, C, 1, 608);
        in.set(SparseMlaInput.METADATA, meta.compute(in), DType.INT32, 2048);
        out.set(SparseMlaOutput.ATTN_OUT, attnOut, DType.BFLOAT16, 1, 1, MN, D);
        try (Plan plan = op.plan(in, out)) {
          plan.run(in, out);
        }
      }
    }
    byte[] expected = Files.readAllBytes(reference.resolve("sparse_mla.bin"));
    assertArrayEquals(expected, contents(attnOut));
  }
}
