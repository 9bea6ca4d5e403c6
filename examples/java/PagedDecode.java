// Paged GroupQueryAttention from Java: a block pool hands out the KV blocks of two sequences (one
// forked from the other, copy-on-write), and a decode loop runs both as one batch.
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import org.attnrt.AttnrtRuntime;
import org.attnrt.BlockCopy;
import org.attnrt.BlockPool;
import org.attnrt.BlockTable;
import org.attnrt.DType;
import org.attnrt.PagedGqaAttributes;
import org.attnrt.PagedGqaInput;
import org.attnrt.PagedGqaOp;
import org.attnrt.PagedGqaOutput;
import org.attnrt.Plan;
import org.attnrt.Tensors;
import org.attnrt.Workspace;

public final class PagedDecode {
  static final int N = 4;            // query heads
  static final int NKV = 2;          // key/value heads
  static final int H = 16;           // head size
  static final int BLOCK = 4;        // tokens per block
  static final int NUM_BLOCKS = 16;  // blocks in the pool
  static final int MAX_BLOCKS = 4;   // block-table slots per sequence (16 tokens)
  static final int BLOCK_BYTES = BLOCK * NKV * H * 4;

  static int seed = 1;

  static FloatBuffer random(int count) {   // deterministic inputs in [-1, 1)
    FloatBuffer b = ByteBuffer.allocateDirect(count * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
    for (int i = 0; i < count; ++i) {
      seed = seed * 1103515245 + 12345;
      b.put(i, ((seed >>> 8) & 0xFFFF) / 32768f - 1f);
    }
    return b;
  }

  static IntBuffer ints(int value) {
    IntBuffer b = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).asIntBuffer();
    return b.put(0, value);
  }

  public static void main(String[] args) {
    // The K and V pools (BSNH: [NUM_BLOCKS, BLOCK, NKV, H]); the pool decides which block holds
    // which token, the op writes each step's new rows into them.
    ByteBuffer keyCache = ByteBuffer.allocateDirect(NUM_BLOCKS * BLOCK_BYTES).order(ByteOrder.nativeOrder());
    ByteBuffer valueCache = ByteBuffer.allocateDirect(NUM_BLOCKS * BLOCK_BYTES).order(ByteOrder.nativeOrder());
    try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(2).build();
        PagedGqaAttributes attributes = PagedGqaAttributes.of(N, NKV, BLOCK);
        PagedGqaOp op = new PagedGqaOp(rt, attributes);
        BlockPool pool = new BlockPool(NUM_BLOCKS, BLOCK);
        Tensors in = op.inputs();
        Tensors out = op.outputs()) {
      in.set(PagedGqaInput.KEY_CACHE, keyCache, DType.FLOAT32, NUM_BLOCKS, BLOCK, NKV, H)
          .set(PagedGqaInput.VALUE_CACHE, valueCache, DType.FLOAT32, NUM_BLOCKS, BLOCK, NKV, H);

      // The prompt of sequence a: 6 tokens (a block and a half).
      int prompt = 6;
      long a = pool.addSequence();
      pool.append(a, prompt);
      BlockTable table = pool.blockTable(new long[] {a}, MAX_BLOCKS);
      FloatBuffer output = random(prompt * N * H);
      in.set(PagedGqaInput.QUERY, random(prompt * N * H), DType.FLOAT32, 1, prompt, N * H)
          .set(PagedGqaInput.KEY, random(prompt * NKV * H), DType.FLOAT32, 1, prompt, NKV * H)
          .set(PagedGqaInput.VALUE, random(prompt * NKV * H), DType.FLOAT32, 1, prompt, NKV * H)
          .set(PagedGqaInput.SEQLENS_K, table.seqlensK, DType.INT32, 1)
          .set(PagedGqaInput.TOTAL_SEQUENCE_LENGTH, ints(prompt), DType.INT32, 1)
          .set(PagedGqaInput.BLOCK_TABLE, table.table, DType.INT32, 1, MAX_BLOCKS);
      out.set(PagedGqaOutput.OUTPUT, output, DType.FLOAT32, 1, prompt, N * H);
      try (Plan plan = op.plan(in, out)) {
        plan.run(in, out);
        System.out.printf("prompt: %d tokens in blocks %d, %d (%s)%n", prompt, table.block(0, 0),
            table.block(0, 1), plan.kernel());
      }

      // Sequence b shares a's blocks; both then decode one token per step as a batch of two.
      long b = pool.fork(a);
      long[] batch = {a, b};
      IntBuffer blockTable = IntBuffer.allocate(0);
      for (int step = 0; step < 4; ++step) {
        for (long sequence : batch) {
          BlockCopy copy = pool.append(sequence, 1);
          if (copy != null) {                       // the last block was shared: copy-on-write
            copy.apply(keyCache, BLOCK_BYTES);
            copy.apply(valueCache, BLOCK_BYTES);
            System.out.println("  sequence " + sequence + ": " + copy);
          }
        }
        table = pool.blockTable(batch, MAX_BLOCKS);
        int total = (int) Math.max(pool.length(a), pool.length(b));
        output = random(2 * N * H);
        in.set(PagedGqaInput.QUERY, random(2 * N * H), DType.FLOAT32, 2, 1, N * H)
            .set(PagedGqaInput.KEY, random(2 * NKV * H), DType.FLOAT32, 2, 1, NKV * H)
            .set(PagedGqaInput.VALUE, random(2 * NKV * H), DType.FLOAT32, 2, 1, NKV * H)
            .set(PagedGqaInput.SEQLENS_K, table.seqlensK, DType.INT32, 2)
            .set(PagedGqaInput.TOTAL_SEQUENCE_LENGTH, ints(total), DType.INT32, 1)
            .set(PagedGqaInput.BLOCK_TABLE, table.table, DType.INT32, 2, MAX_BLOCKS);
        out.set(PagedGqaOutput.OUTPUT, output, DType.FLOAT32, 2, 1, N * H);
        // One plan per shape (cached by the op); runIn uses a workspace allocated once per plan.
        try (Plan plan = op.plan(in, out); Workspace workspace = plan.newWorkspace()) {
          plan.runIn(in, out, workspace);
        }
        System.out.printf("step %d: lengths %d, %d; output[0] %.6f, %.6f%n", step, pool.length(a),
            pool.length(b), output.get(0), output.get(N * H));
        blockTable = table.table;
      }
      System.out.println("blocks of a, b: " + blockTable.get(0) + " " + blockTable.get(1) + " "
          + blockTable.get(2) + " | " + blockTable.get(MAX_BLOCKS) + " " + blockTable.get(MAX_BLOCKS + 1)
          + " " + blockTable.get(MAX_BLOCKS + 2));
      System.out.println(pool.stats());
      pool.remove(b);
      pool.truncate(a, 4);
      System.out.println("after remove(b), truncate(a, 4): " + pool.stats());
    }
  }
}
