package org.attnrt;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Locale;
import java.util.Random;
import org.junit.Test;

/**
 * Paged GroupQueryAttention over a packed variable-length batch from Java: one prefill chunk
 * among decodes, checked against attention computed here in double precision from the op's
 * documented semantics (query row i of sequence b is token T_b - q_len_b + i and sees keys
 * [0, that token]; the new K/V rows land in the blocks of the table first).
 */
public class PagedGqaVarlenTest {
  static final int N = 4;
  static final int NKV = 2;
  static final int H = 16;
  static final int BLOCK = 4;

  static FloatBuffer floats(int count) {
    return ByteBuffer.allocateDirect(count * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }

  static IntBuffer ints(int... values) {
    IntBuffer b = ByteBuffer.allocateDirect(values.length * 4).order(ByteOrder.nativeOrder())
        .asIntBuffer();
    b.put(values).rewind();
    return b;
  }

  @Test
  public void enumsMatchTheLibrary() {
    for (PagedGqaVarlenInput input : PagedGqaVarlenInput.values()) {
      String expected = input == PagedGqaVarlenInput.NUM_INPUTS ? ""
          : input.name().toLowerCase(Locale.ROOT);
      assertEquals(expected, Attnrt.opInputName(OpKind.PAGED_GQA_VARLEN, input.swigValue()));
    }
    for (PagedGqaVarlenOutput output : PagedGqaVarlenOutput.values()) {
      String expected = output == PagedGqaVarlenOutput.NUM_OUTPUTS ? ""
          : output.name().toLowerCase(Locale.ROOT);
      assertEquals(expected, Attnrt.opOutputName(OpKind.PAGED_GQA_VARLEN, output.swigValue()));
    }
  }

  /** A prefill chunk of 5 rows after 4 cached tokens, then two decodes; one padding row. */
  @Test
  public void mixedBatchMatchesAttentionComputedHere() {
    runMixedBatch("*naive.scalar*");
    runMixedBatch("*flash*");
  }

  private static void runMixedBatch(String kernels) {
    Random rng = new Random(7);
    int[] qLens = {5, 1, 1};
    int[] seqLens = {9, 7, 3};
    int[][] blocks = {{5, 0, 3}, {2, 4, -1}, {1, -1, -1}};  // physical blocks, -1 unused
    int batch = qLens.length;
    int maxBlocks = 3;
    int numBlocks = 6;
    int rows = 7;           // query_start_loc[B]
    int numTokens = rows + 1;  // one padding row the op must leave alone
    int[] start = {0, 5, 6, 7};
    // K and V of every token of every sequence: cached tokens go into the pools here, new ones
    // are the op's key/value rows.
    double[][][] keys = new double[batch][][];
    double[][][] values = new double[batch][][];
    FloatBuffer keyCache = floats(numBlocks * BLOCK * NKV * H);
    FloatBuffer valueCache = floats(numBlocks * BLOCK * NKV * H);
    FloatBuffer key = floats(numTokens * NKV * H);
    FloatBuffer value = floats(numTokens * NKV * H);
    for (int b = 0; b < batch; ++b) {
      keys[b] = new double[seqLens[b]][NKV * H];
      values[b] = new double[seqLens[b]][NKV * H];
      int past = seqLens[b] - qLens[b];
      for (int t = 0; t < seqLens[b]; ++t) {
        for (int e = 0; e < NKV * H; ++e) {
          float k = (float) rng.nextGaussian();
          float v = (float) rng.nextGaussian();
          keys[b][t][e] = k;
          values[b][t][e] = v;
          if (t < past) {  // BSNH pool: [block][slot][kv head][h]
            int at = (blocks[b][t / BLOCK] * BLOCK + t % BLOCK) * NKV * H + e;
            keyCache.put(at, k);
            valueCache.put(at, v);
          } else {
            int row = start[b] + t - past;
            key.put(row * NKV * H + e, k);
            value.put(row * NKV * H + e, v);
          }
        }
      }
    }
    FloatBuffer query = floats(numTokens * N * H);
    for (int i = 0; i < numTokens * N * H; ++i) {
      query.put(i, (float) rng.nextGaussian());
    }
    int[] table = new int[batch * maxBlocks];
    for (int b = 0; b < batch; ++b) {
      System.arraycopy(blocks[b], 0, table, b * maxBlocks, maxBlocks);
    }
    FloatBuffer output = floats(numTokens * N * H);
    for (int i = 0; i < numTokens * N * H; ++i) {
      output.put(i, -7.0f);
    }

    try (AttnrtRuntime rt = AttnrtRuntime.builder().kernel(kernels).numThreads(2).build();
        PagedGqaAttributes attributes = PagedGqaAttributes.of(N, NKV, BLOCK);
        PagedGqaVarlenOp op = new PagedGqaVarlenOp(rt, attributes);
        Tensors in = op.inputs();
        Tensors out = op.outputs()) {
      in.set(PagedGqaVarlenInput.QUERY, query, DType.FLOAT32, numTokens, N * H)
          .set(PagedGqaVarlenInput.KEY, key, DType.FLOAT32, numTokens, NKV * H)
          .set(PagedGqaVarlenInput.VALUE, value, DType.FLOAT32, numTokens, NKV * H)
          .set(PagedGqaVarlenInput.KEY_CACHE, keyCache, DType.FLOAT32, numBlocks, BLOCK, NKV, H)
          .set(PagedGqaVarlenInput.VALUE_CACHE, valueCache, DType.FLOAT32, numBlocks, BLOCK, NKV,
              H)
          .set(PagedGqaVarlenInput.QUERY_START_LOC, ints(start), DType.INT32, batch + 1)
          .set(PagedGqaVarlenInput.SEQ_LENS, ints(seqLens), DType.INT32, batch)
          .set(PagedGqaVarlenInput.BLOCK_TABLE, ints(table), DType.INT32, batch, maxBlocks);
      out.set(PagedGqaVarlenOutput.OUTPUT, output, DType.FLOAT32, numTokens, N * H);
      try (Plan plan = op.plan(in, out)) {
        assertTrue(plan.kernel(), plan.kernel().contains(".paged_gqa_varlen."));
        plan.run(in, out);
      }
    }

    double scale = 1.0 / Math.sqrt(H);
    int group = N / NKV;
    for (int b = 0; b < batch; ++b) {
      int past = seqLens[b] - qLens[b];
      for (int i = 0; i < qLens[b]; ++i) {
        int row = start[b] + i;
        int token = past + i;
        for (int n = 0; n < N; ++n) {
          int kvh = n / group;
          double[] scores = new double[token + 1];
          double max = Double.NEGATIVE_INFINITY;
          for (int j = 0; j <= token; ++j) {
            double dot = 0;
            for (int h = 0; h < H; ++h) {
              dot += query.get(row * N * H + n * H + h) * keys[b][j][kvh * H + h];
            }
            scores[j] = dot * scale;
            max = Math.max(max, scores[j]);
          }
          double sum = 0;
          for (int j = 0; j <= token; ++j) {
            scores[j] = Math.exp(scores[j] - max);
            sum += scores[j];
          }
          for (int h = 0; h < H; ++h) {
            double want = 0;
            for (int j = 0; j <= token; ++j) {
              want += scores[j] / sum * values[b][j][kvh * H + h];
            }
            float got = output.get(row * N * H + n * H + h);
            assertEquals(kernels + ": sequence " + b + " row " + i + " head " + n + " h " + h,
                want, got, 1e-4);
          }
        }
      }
      // The new rows are in the pools, in the slots the table gives their tokens.
      for (int t = past; t < seqLens[b]; ++t) {
        int at = (blocks[b][t / BLOCK] * BLOCK + t % BLOCK) * NKV * H;
        for (int e = 0; e < NKV * H; ++e) {
          assertEquals(keys[b][t][e], keyCache.get(at + e), 0.0);
          assertEquals(values[b][t][e], valueCache.get(at + e), 0.0);
        }
      }
    }
    // The padding row past query_start_loc[B] is neither read nor written.
    for (int e = 0; e < N * H; ++e) {
      assertEquals(-7.0f, output.get(rows * N * H + e), 0.0f);
    }
  }
}
