package org.attnrt;

import static org.attnrt.BindingsTest.expectFailure;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.ShortBuffer;
import java.util.Locale;
import java.util.Random;
import org.junit.Test;

/** Paged GQA over a BlockPool, sparse MLA with its metadata and encoders, the builder, enums. */
public class OpsTest {
  static final int N = 4;
  static final int NKV = 2;
  static final int H = 16;

  static ByteBuffer bytes(int count) {
    return ByteBuffer.allocateDirect(count).order(ByteOrder.nativeOrder());
  }

  static FloatBuffer random(Random rng, int count) {
    FloatBuffer b = bytes(count * 4).asFloatBuffer();
    for (int i = 0; i < count; ++i) {
      b.put(i, (float) rng.nextGaussian());
    }
    return b;
  }

  static IntBuffer ints(int... values) {
    IntBuffer b = bytes(values.length * 4).asIntBuffer();
    b.put(values).rewind();
    return b;
  }

  @Test
  public void enumsMatchTheLibrary() {
    for (PagedGqaInput input : PagedGqaInput.values()) {
      if (input != PagedGqaInput.NUM_INPUTS) {
        assertEquals(input.name().toLowerCase(Locale.ROOT),
            Attnrt.opInputName(OpKind.PAGED_GQA, input.swigValue()));
      }
    }
    assertEquals("", Attnrt.opInputName(OpKind.PAGED_GQA, PagedGqaInput.NUM_INPUTS.swigValue()));
    for (PagedGqaOutput output : PagedGqaOutput.values()) {
      if (output != PagedGqaOutput.NUM_OUTPUTS) {
        assertEquals(output.name().toLowerCase(Locale.ROOT),
            Attnrt.opOutputName(OpKind.PAGED_GQA, output.swigValue()));
      }
    }
    for (SparseMlaInput input : SparseMlaInput.values()) {
      if (input != SparseMlaInput.NUM_INPUTS) {
        assertEquals(input.name().toLowerCase(Locale.ROOT),
            Attnrt.opInputName(OpKind.SPARSE_MLA, input.swigValue()));
      }
    }
    assertEquals("", Attnrt.opInputName(OpKind.SPARSE_MLA, SparseMlaInput.NUM_INPUTS.swigValue()));
    for (SparseMlaOutput output : SparseMlaOutput.values()) {
      if (output != SparseMlaOutput.NUM_OUTPUTS) {
        assertEquals(output.name().toLowerCase(Locale.ROOT),
            Attnrt.opOutputName(OpKind.SPARSE_MLA, output.swigValue()));
      }
    }
    try (SparseMlaAttributes a = new SparseMlaAttributes()) {
      assertEquals(SparseMlaMaskMode.NONE, a.getOriMaskMode());
      a.setOriMaskMode(SparseMlaMaskMode.SLIDING_WINDOW);
      assertEquals(SparseMlaMaskMode.SLIDING_WINDOW, a.getOriMaskMode());
      assertEquals(SparseMlaLayout.BSND, a.getLayoutKv());
      a.setLayoutKv(SparseMlaLayout.PA_BBND);
      assertEquals(SparseMlaLayout.PA_BBND, a.getLayoutKv());
    }
    try (PagedGqaAttributes a = PagedGqaAttributes.of(N, NKV, 16)) {
      assertEquals(PagedKvLayout.BSNH, a.getKvLayout());
      assertEquals(N, a.getGqa().getNumHeads());
      a.getGqa().setKQuantType(GqaQuantType.PER_TENSOR);
      assertEquals(GqaQuantType.PER_TENSOR, a.getGqa().getKQuantType());
    }
    assertEquals(16, SparseMlaEncoder.tq4Codebook().length);
  }

  @Test
  public void builderOptions() {
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(3).debug(false).build()) {
      assertEquals(3, rt.numThreads());
    }
    try (AttnrtRuntime rt = AttnrtRuntime.builder().searchDefaultPaths(false).build()) {
      assertTrue(rt.plugins().isEmpty());
    }
    AttnrtException e = expectFailure(() -> AttnrtRuntime.builder().numThreads(-1));
    assertTrue(e.getDetail(), e.getDetail().contains("numThreads"));
  }

  @Test
  public void blockPoolOperations() {
    try (BlockPool pool = new BlockPool(4, 2)) {
      long a = pool.addSequence();
      assertNull(pool.append(a, 3));
      assertEquals(3, pool.length(a));
      assertEquals(2, pool.numBlocks(a));
      long b = pool.fork(a);
      assertEquals(3, pool.length(b));
      BlockPoolStats stats = pool.stats();
      assertEquals(2, stats.blocksUsed);
      assertEquals(2, stats.blocksShared);
      assertEquals(2, stats.numSequences);
      BlockCopy copy = pool.append(b, 1);  // b's last block is shared and half full
      assertNotNull(copy);
      assertEquals(1, copy.numTokens);
      BlockTable table = pool.blockTable(new long[] {a, b}, 3);
      assertEquals(copy.srcBlock, table.block(0, 1));
      assertEquals(copy.dstBlock, table.block(1, 1));
      assertEquals(table.block(0, 0), table.block(1, 0));
      assertEquals(-1, table.block(0, 2));
      assertEquals(2, table.seqlensK.get(0));
      assertEquals(3, table.seqlensK.get(1));
      pool.truncate(b, 1);
      assertEquals(1, pool.numBlocks(b));
      pool.remove(a);
      assertEquals(1, pool.stats().blocksUsed);
      assertEquals(0.25, pool.stats().utilization, 0);

      AttnrtException e = expectFailure(() -> pool.length(a));
      assertEquals(Status.ERROR_NOT_FOUND, e.getStatus());
      e = expectFailure(() -> pool.append(b, 100));
      assertEquals(Status.ERROR_OUT_OF_MEMORY, e.getStatus());
      assertTrue(e.getDetail(), e.getDetail().contains("free"));
      e = expectFailure(() -> pool.blockTable(new long[] {b}, 0));
      assertEquals(Status.ERROR_INVALID_ARGUMENT, e.getStatus());
      e = expectFailure(() -> pool.blockTable(new long[] {b}, 2, IntBuffer.allocate(2), null));
      assertTrue(e.getDetail(), e.getDetail().startsWith("block_table: the buffer is not direct"));
      e = expectFailure(() -> pool.truncate(b, 5));
      assertTrue(e.getDetail(), e.getDetail().contains("new_length"));
    }
    BlockPool closed = new BlockPool(1, 1);
    closed.close();
    AttnrtException e = expectFailure(() -> closed.addSequence());
    assertTrue(e.getDetail(), e.getDetail().contains("block pool is closed"));
    e = expectFailure(() -> new BlockPool(0, 16));
    assertTrue(e.getDetail(), e.getDetail().contains("num_blocks"));
  }

  /** A decode loop over the pool (with a fork) equals GroupQueryAttention over contiguous caches. */
  @Test
  public void pagedDecodeLoopMatchesGqa() {
    Random rng = new Random(5);
    int block = 4;
    int numBlocks = 12;
    int maxBlocks = 4;
    int cap = maxBlocks * block;
    int blockBytes = block * NKV * H * 4;
    ByteBuffer keyCache = bytes(numBlocks * blockBytes);
    ByteBuffer valueCache = bytes(numBlocks * blockBytes);
    // Contiguous caches of the two sequences for GQA: (B=1, Nkv, cap, H) each.
    FloatBuffer[] gk = {bytes(NKV * cap * H * 4).asFloatBuffer(), bytes(NKV * cap * H * 4).asFloatBuffer()};
    FloatBuffer[] gv = {bytes(NKV * cap * H * 4).asFloatBuffer(), bytes(NKV * cap * H * 4).asFloatBuffer()};
    try (AttnrtRuntime rt = AttnrtRuntime.builder().kernel("*naive*").numThreads(2).build();
        PagedGqaAttributes pa = PagedGqaAttributes.of(N, NKV, block);
        PagedGqaOp paged = new PagedGqaOp(rt, pa);
        GqaAttributes ga = GqaAttributes.of(N, NKV);
        GqaOp gqa = new GqaOp(rt, ga);
        BlockPool pool = new BlockPool(numBlocks, block);
        Tensors in = paged.inputs();
        Tensors out = paged.outputs();
        Tensors gin = gqa.inputs();
        Tensors gout = gqa.outputs()) {
      in.set(PagedGqaInput.KEY_CACHE, keyCache, DType.FLOAT32, numBlocks, block, NKV, H)
          .set(PagedGqaInput.VALUE_CACHE, valueCache, DType.FLOAT32, numBlocks, block, NKV, H);
      int prompt = 5;
      long a = pool.addSequence();
      pool.append(a, prompt);
      FloatBuffer q = random(rng, prompt * N * H);
      FloatBuffer k = random(rng, prompt * NKV * H);
      FloatBuffer v = random(rng, prompt * NKV * H);
      BlockTable t = pool.blockTable(new long[] {a}, maxBlocks);
      FloatBuffer o = bytes(prompt * N * H * 4).asFloatBuffer();
      in.set(PagedGqaInput.QUERY, q, DType.FLOAT32, 1, prompt, N * H)
          .set(PagedGqaInput.KEY, k, DType.FLOAT32, 1, prompt, NKV * H)
          .set(PagedGqaInput.VALUE, v, DType.FLOAT32, 1, prompt, NKV * H)
          .set(PagedGqaInput.SEQLENS_K, t.seqlensK, DType.INT32, 1)
          .set(PagedGqaInput.TOTAL_SEQUENCE_LENGTH, ints(prompt), DType.INT32, 1)
          .set(PagedGqaInput.BLOCK_TABLE, t.table, DType.INT32, 1, maxBlocks);
      out.set(PagedGqaOutput.OUTPUT, o, DType.FLOAT32, 1, prompt, N * H);
      try (Plan plan = paged.plan(in, out)) {
        assertTrue(plan.kernel(), plan.kernel().startsWith("cpu_x86.paged_gqa.naive"));
        plan.run(in, out);
      }
      // The same prompt into both contiguous caches (sequence b is a fork of a).
      for (int s = 0; s < 2; ++s) {
        runGqa(gin, gout, gqa, q, k, v, prompt, prompt, gk[s], gv[s], cap);
      }
      long b = pool.fork(a);
      long[] batch = {a, b};
      int copies = 0;
      for (int step = 1; step <= 4; ++step) {
        for (long seq : batch) {
          BlockCopy copy = pool.append(seq, 1);
          if (copy != null) {
            copy.apply(keyCache, blockBytes);
            copy.apply(valueCache, blockBytes);
            ++copies;
          }
        }
        t = pool.blockTable(batch, maxBlocks);
        int total = prompt + step;
        FloatBuffer q2 = random(rng, 2 * N * H);
        FloatBuffer k2 = random(rng, 2 * NKV * H);
        FloatBuffer v2 = random(rng, 2 * NKV * H);
        FloatBuffer o2 = bytes(2 * N * H * 4).asFloatBuffer();
        in.set(PagedGqaInput.QUERY, q2, DType.FLOAT32, 2, 1, N * H)
            .set(PagedGqaInput.KEY, k2, DType.FLOAT32, 2, 1, NKV * H)
            .set(PagedGqaInput.VALUE, v2, DType.FLOAT32, 2, 1, NKV * H)
            .set(PagedGqaInput.SEQLENS_K, t.seqlensK, DType.INT32, 2)
            .set(PagedGqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1)
            .set(PagedGqaInput.BLOCK_TABLE, t.table, DType.INT32, 2, maxBlocks);
        out.set(PagedGqaOutput.OUTPUT, o2, DType.FLOAT32, 2, 1, N * H);
        try (Plan plan = paged.plan(in, out); Workspace ws = plan.newWorkspace()) {
          assertEquals(plan.workspaceSize(), ws.size());
          plan.runIn(in, out, ws);
        }
        for (int s = 0; s < 2; ++s) {
          FloatBuffer want = runGqa(gin, gout, gqa, slice(q2, s, N * H), slice(k2, s, NKV * H),
              slice(v2, s, NKV * H), 1, total, gk[s], gv[s], cap);
          float[] got = new float[N * H];
          float[] expected = new float[N * H];
          for (int i = 0; i < N * H; ++i) {
            got[i] = o2.get(s * N * H + i);
            expected[i] = want.get(i);
          }
          assertArrayEquals("step " + step + " sequence " + s, expected, got, 0f);
        }
      }
      assertEquals(1, copies);
    }
  }

  static FloatBuffer slice(FloatBuffer b, int index, int size) {
    FloatBuffer d = b.duplicate();
    d.position(index * size);
    return d;
  }

  static FloatBuffer runGqa(Tensors in, Tensors out, GqaOp op, FloatBuffer q, FloatBuffer k,
      FloatBuffer v, int s, int total, FloatBuffer ck, FloatBuffer cv, int cap) {
    FloatBuffer o = bytes(s * N * H * 4).asFloatBuffer();
    in.set(GqaInput.QUERY, q, DType.FLOAT32, 1, s, N * H)
        .set(GqaInput.KEY, k, DType.FLOAT32, 1, s, NKV * H)
        .set(GqaInput.VALUE, v, DType.FLOAT32, 1, s, NKV * H)
        .set(GqaInput.PAST_KEY, ck, DType.FLOAT32, 1, NKV, cap, H)
        .set(GqaInput.PAST_VALUE, cv, DType.FLOAT32, 1, NKV, cap, H)
        .set(GqaInput.SEQLENS_K, ints(total - 1), DType.INT32, 1)
        .set(GqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1);
    out.set(GqaOutput.OUTPUT, o, DType.FLOAT32, 1, s, N * H)
        .set(GqaOutput.PRESENT_KEY, ck, DType.FLOAT32, 1, NKV, cap, H)
        .set(GqaOutput.PRESENT_VALUE, cv, DType.FLOAT32, 1, NKV, cap, H);
    try (Plan plan = op.plan(in, out)) {
      plan.run(in, out);
    }
    return o;
  }

  // ---- sparse MLA ----------------------------------------------------------------------------

  static final int D = 512;

  /** Rows whose 512 values are all `value`. */
  static FloatBuffer constRows(float... values) {
    FloatBuffer b = bytes(values.length * D * 4).asFloatBuffer();
    for (int r = 0; r < values.length; ++r) {
      for (int d = 0; d < D; ++d) {
        b.put(r * D + d, values[r]);
      }
    }
    return b;
  }

  static ShortBuffer zerosBf16(int count) {
    return bytes(count * 2).asShortBuffer();
  }

  static float bf16At(ShortBuffer b, int i) {
    return Float.intBitsToFloat(b.get(i) << 16);
  }

  /** Runs the metadata op then the main op; with q = 0 every score is equal. */
  static ShortBuffer runSparse(AttnrtRuntime rt, SparseMlaAttributes a, Tensors in, long... qShape) {
    int count = 1;
    for (long d : qShape) {
      count *= (int) d;
    }
    ShortBuffer attnOut = zerosBf16(count);
    try (SparseMlaMetadataOp meta = new SparseMlaMetadataOp(rt, a);
        SparseMlaOp op = new SparseMlaOp(rt, a);
        Tensors out = op.outputs()) {
      in.set(SparseMlaInput.METADATA, null, DType.INT32);
      in.set(SparseMlaInput.METADATA, meta.compute(in), DType.INT32, 2048);
      out.set(SparseMlaOutput.ATTN_OUT, attnOut, DType.BFLOAT16, qShape);
      try (Plan plan = op.plan(in, out)) {
        plan.run(in, out);
      }
    }
    return attnOut;
  }

  @Test
  public void sparseMlaMode1WithMetadata() {
    try (AttnrtRuntime rt = new AttnrtRuntime();
        SparseMlaAttributes a = SparseMlaAttributes.of(SparseMlaQuantMode.MODE1);
        Tensors in = Tensors.sparseMlaInputs()) {
      ByteBuffer kv = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE1, constRows(1, 2, 3, 4));
      assertEquals(4 * 608, kv.capacity());
      in.set(SparseMlaInput.Q, zerosBf16(2 * D), DType.BFLOAT16, 1, 1, 2, D)
          .set(SparseMlaInput.ORI_KV, kv, DType.UINT8, 1, 4, 1, 608);
      ShortBuffer o = runSparse(rt, a, in, 1, 1, 2, D);
      assertEquals(2.5f, bf16At(o, 0), 1e-2f);        // the mean of the visible keys
      assertEquals(2.5f, bf16At(o, D + 511), 1e-2f);

      // Errors: metadata missing, and metadata of another problem (named by word).
      try (SparseMlaOp op = new SparseMlaOp(rt, a); Tensors out = op.outputs()) {
        out.set(SparseMlaOutput.ATTN_OUT, zerosBf16(2 * D), DType.BFLOAT16, 1, 1, 2, D);
        in.clear(SparseMlaInput.METADATA.swigValue());
        AttnrtException e = expectFailure(() -> op.plan(in, out).close());
        assertEquals(Status.ERROR_INVALID_ARGUMENT, e.getStatus());
        assertTrue(e.getDetail(), e.getDetail().contains("metadata"));
        in.set(SparseMlaInput.METADATA, ints(new int[2048]), DType.INT32, 2048);
        e = expectFailure(() -> {
          try (Plan plan = op.plan(in, out)) {
            plan.run(in, out);
          }
        });
        assertTrue(e.getDetail(), e.getDetail().contains("metadata[0]"));
      }
    }
    try (AttnrtRuntime rt = new AttnrtRuntime(); SparseMlaAttributes unset = new SparseMlaAttributes()) {
      AttnrtException e = expectFailure(() -> new SparseMlaOp(rt, unset).close());
      assertTrue(e.getDetail(), e.getDetail().contains("quant_mode"));
    }
  }

  @Test
  public void sparseMlaMode2PagedBlocks() {
    int block = 2;
    ByteBuffer blocks = bytes(3 * block * 584);     // 3 blocks; the table uses 2 then 0
    ByteBuffer b2 = blocks.duplicate().position(2 * block * 584).slice().order(ByteOrder.nativeOrder());
    ByteBuffer b0 = blocks.duplicate().position(0).limit(block * 584).slice().order(ByteOrder.nativeOrder());
    SparseMlaEncoder.encodeMode2(constRows(1, 2), 2, b2, block, 0);
    SparseMlaEncoder.encodeMode2(constRows(3), 1, b0, block, 0);
    SparseMlaEncoder.encodeMode2(constRows(4), 1, b0, block, 1);
    try (AttnrtRuntime rt = new AttnrtRuntime();
        SparseMlaAttributes a = SparseMlaAttributes.of(SparseMlaQuantMode.MODE2);
        Tensors in = Tensors.sparseMlaInputs()) {
      a.setLayoutKv(SparseMlaLayout.PA_BBND);
      in.set(SparseMlaInput.Q, zerosBf16(D), DType.BFLOAT16, 1, 1, 1, D)
          .set(SparseMlaInput.ORI_KV, blocks, DType.UINT8, 3, block, 1, 584)
          .set(SparseMlaInput.ORI_BLOCK_TABLE, ints(2, 0), DType.INT32, 1, 2)
          .set(SparseMlaInput.SEQUSED_ORI_KV, ints(3), DType.INT32, 1);
      ShortBuffer o = runSparse(rt, a, in, 1, 1, 1, D);
      assertEquals(2f, bf16At(o, 0), 1e-2f);           // tokens 1, 2, 3 (seqused 3)
    }
    AttnrtException e = expectFailure(
        () -> SparseMlaEncoder.encodeMode2(constRows(1), 1, bytes(584), 1, 1));
    assertTrue(e.getDetail(), e.getDetail().startsWith("slot:"));
  }

  @Test
  public void sparseMlaMode3Tq4() {
    ByteBuffer cmp = SparseMlaEncoder.encode(SparseMlaQuantMode.MODE3_TQ4, constRows(1, 1));
    assertEquals(2 * 258, cmp.capacity());
    ShortBuffer ori = zerosBf16(4 * D);
    for (int i = 0; i < 4 * D; ++i) {
      ori.put(i, (short) 0x3F00);                       // bf16 0.5
    }
    try (AttnrtRuntime rt = new AttnrtRuntime();
        SparseMlaAttributes a = SparseMlaAttributes.of(SparseMlaQuantMode.MODE3_TQ4);
        Tensors in = Tensors.sparseMlaInputs()) {
      a.setCmpRatio(2);
      a.setCmpMaskMode(SparseMlaMaskMode.RIGHT_DOWN_CAUSAL);
      in.set(SparseMlaInput.Q, zerosBf16(D), DType.BFLOAT16, 1, 1, 1, D)
          .set(SparseMlaInput.ORI_KV, ori, DType.BFLOAT16, 1, 4, 1, D)
          .set(SparseMlaInput.CMP_KV, cmp, DType.UINT8, 1, 2, 1, 258);
      ShortBuffer o = runSparse(rt, a, in, 1, 1, 1, D);
      float first = bf16At(o, 0);
      assertTrue("attn_out[0] = " + first, Float.isFinite(first) && first > 0.3f && first < 1.2f);
    }
    FloatBuffer bad = constRows(1);
    bad.put(5, Float.NaN);
    AttnrtException e = expectFailure(() -> SparseMlaEncoder.encode(SparseMlaQuantMode.MODE3_TQ4, bad));
    assertEquals(Status.ERROR_INVALID_ARGUMENT, e.getStatus());
    e = expectFailure(() -> SparseMlaEncoder.encode(SparseMlaQuantMode.MODE2, bad));
    assertTrue(e.getDetail(), e.getDetail().contains("encodeMode2"));
  }
}
