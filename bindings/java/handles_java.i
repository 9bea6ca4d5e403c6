/*
 * handles_java.i — Java shape of the proxies (part of attnrt.i): AutoCloseable handles without
 * finalizers, package-private plumbing, and the public conveniences written in Java.
 */

// The generated module and JNI classes are plumbing: org.attnrt.Attnrt is the public face.
%pragma(java) jniclassclassmodifiers="final class"
%pragma(java) moduleclassmodifiers="final class"
%pragma(java) jniclasscode=%{
  static {
    NativeLibrary.load();
  }
%}

// Native memory is released by close() (try-with-resources), never by a finalizer.
%typemap(javafinalize) SWIGTYPE ""

// Raw records are read once by the Java layer and copied into PluginInfo, KernelInfo, ...
%typemap(javaclassmodifiers) attnrt_plugin_info "final class"
%typemap(javaclassmodifiers) attnrt_kernel_info "final class"
%typemap(javaclassmodifiers) attnrt_diagnostic "final class"
%typemap(javaclassmodifiers) attnrt_candidate "final class"
%typemap(javaclassmodifiers) attnrt_plan_info "final class"
%typemap(javaclassmodifiers) attnrt_explanation "final class"
%javamethodmodifiers attnrt_runtime::plugin_count_ "";
%javamethodmodifiers attnrt_runtime::plugin_info_ "";
%javamethodmodifiers attnrt_runtime::plugin_fact_key_ "";
%javamethodmodifiers attnrt_runtime::plugin_fact_value_ "";
%javamethodmodifiers attnrt_runtime::plugin_kernel_ "";
%javamethodmodifiers attnrt_runtime::diagnostic_count_ "";
%javamethodmodifiers attnrt_runtime::diagnostic_ "";
%javamethodmodifiers attnrt_plan::info_ "";
%javamethodmodifiers attnrt_op::explain_ "";
%rename(explainNative) attnrt_op::explain_;
%rename(numThreads) attnrt_runtime::num_threads_;
%rename(planCacheHits) attnrt_op::plan_cache_hits_;
%rename(planCacheMisses) attnrt_op::plan_cache_misses_;
// The runtime is made with new AttnrtRuntime() (defaults) or AttnrtRuntime.builder()...build(): the
// constructor with every option positional is private.
%javamethodmodifiers attnrt_runtime::attnrt_runtime "private";
%javamethodmodifiers attnrt_runtime::attnrt_runtime() "public";

// Ops of each kind are the subclasses GqaOp, PagedGqaOp, SparseMlaOp and SparseMlaMetadataOp.
%javamethodmodifiers attnrt_op::attnrt_op(attnrt_runtime*, const attnrt_sparse_mla_attributes*, bool) "protected";

// Plans: run() and runIn() (a caller-owned Workspace).
%rename(runIn) attnrt_plan::run_in_;

// The block pool: camelCase names; arrays and records go through Java wrappers (javacode below).
%rename(addSequence) attnrt_block_pool::add_sequence_;
%rename(length) attnrt_block_pool::sequence_length_;
%rename(numBlocks) attnrt_block_pool::sequence_num_blocks_;
%rename(appendNative) attnrt_block_pool::append_;
%rename(blockTableNative) attnrt_block_pool::block_table_;
%rename(statNative) attnrt_block_pool::stat_;
%rename(ratioNative) attnrt_block_pool::ratio_;
%javamethodmodifiers attnrt_block_pool::append_ "";
%javamethodmodifiers attnrt_block_pool::block_table_ "";
%javamethodmodifiers attnrt_block_pool::stat_ "";
%javamethodmodifiers attnrt_block_pool::ratio_ "";
%typemap(javaclassmodifiers) attnrt_block_copy "final class"

// The encoders are public through SparseMlaEncoder; op_input_name/op_output_name through Attnrt.

// Attribute fields whose values are a C enum are Java enums (setKvLayout(PagedKvLayout.BNSH), ...).
%define ATTNRT_JAVA_ENUM_FIELD(ENUM, FIELD)
%typemap(jstype) int32_t FIELD "ENUM"
%typemap(javain) int32_t FIELD "$javainput.swigValue()"
%typemap(javaout) int32_t FIELD {
    return ENUM.swigToEnum($jnicall);
  }
%enddef
ATTNRT_JAVA_ENUM_FIELD(GqaQuantType, k_quant_type)
ATTNRT_JAVA_ENUM_FIELD(GqaQuantType, v_quant_type)
ATTNRT_JAVA_ENUM_FIELD(GqaQkOutput, qk_output)
ATTNRT_JAVA_ENUM_FIELD(PagedKvLayout, kv_layout)
ATTNRT_JAVA_ENUM_FIELD(SparseMlaQuantMode, quant_mode)
ATTNRT_JAVA_ENUM_FIELD(SparseMlaLayout, layout_q)
ATTNRT_JAVA_ENUM_FIELD(SparseMlaLayout, layout_kv)
ATTNRT_JAVA_ENUM_FIELD(SparseMlaMaskMode, ori_mask_mode)
ATTNRT_JAVA_ENUM_FIELD(SparseMlaMaskMode, cmp_mask_mode)

%javamethodmodifiers attnrt_bind::TensorList::clear "";
%javamethodmodifiers attnrt_bind::TensorList::clear_all "";
%rename(clearNative) attnrt_bind::TensorList::clear;
%rename(clearAllNative) attnrt_bind::TensorList::clear_all;


%typemap(javainterfaces) attnrt_runtime "AutoCloseable"
%typemap(javacode) attnrt_runtime %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /** A builder of runtime options; {@link Builder#build()} creates the runtime. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * Runtime options. Unset options take the library's defaults (the ATTNRT_* environment variables
   * where the C ABI reads them).
   *
   * <pre>{@code
   * try (AttnrtRuntime rt = AttnrtRuntime.builder().numThreads(4).disable("*avx2*").build()) { ... }
   * }</pre>
   */
  public static final class Builder {
    private final java.util.List<String> pluginPaths = new java.util.ArrayList<>();
    private boolean searchDefaultPaths = true;
    private String kernel;
    private String disable;
    private int debug = -1;
    private int numThreads;

    private Builder() {}

    /**
     * Folders searched first for libattnrt_*.so, in order (added to those given before).
     *
     * @param paths folders
     * @return this builder
     */
    public Builder pluginPaths(String... paths) {
      for (String path : paths) {
        if (path.indexOf(':') >= 0) {
          throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(),
              "pluginPaths: a folder may not contain ':', got \"" + path + "\"");
        }
        pluginPaths.add(path);
      }
      return this;
    }

    /**
     * Whether ATTNRT_PLUGIN_PATH and attnrt/plugins beside libattnrt.so are searched after the
     * plugin paths (default true).
     *
     * @param search false: the plugin paths only
     * @return this builder
     */
    public Builder searchDefaultPaths(boolean search) {
      this.searchDefaultPaths = search;
      return this;
    }

    /**
     * Comma-separated globs of the kernels allowed to run (default: ATTNRT_KERNEL, else all).
     *
     * @param globs e.g. {@code "cpu_x86.*.naive.*"}
     * @return this builder
     */
    public Builder kernel(String globs) {
      this.kernel = globs;
      return this;
    }

    /**
     * Comma-separated globs of the kernels excluded (default: ATTNRT_DISABLE, else none).
     *
     * @param globs e.g. {@code "*avx2*"}
     * @return this builder
     */
    public Builder disable(String globs) {
      this.disable = globs;
      return this;
    }

    /**
     * Logs one line per planned op (default: ATTNRT_DEBUG).
     *
     * @param debug true: on; false: off
     * @return this builder
     */
    public Builder debug(boolean debug) {
      this.debug = debug ? 1 : 0;
      return this;
    }

    /**
     * Size of the CPU thread pool, caller thread included (default 0: ATTNRT_NUM_THREADS, else
     * every hardware thread).
     *
     * @param numThreads threads, 0 for the default
     * @return this builder
     */
    public Builder numThreads(int numThreads) {
      if (numThreads < 0) {
        throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(),
            "numThreads: expected >= 0, got " + numThreads);
      }
      this.numThreads = numThreads;
      return this;
    }

    /**
     * Creates the runtime: discovers and loads the plugins, probes them and ranks their kernels.
     *
     * @return a new runtime, to be closed
     * @throws AttnrtException when creation fails (e.g. INVALID_ARGUMENT for a bad option)
     */
    public AttnrtRuntime build() {
      String paths = pluginPaths.isEmpty() ? null : String.join(":", pluginPaths);
      return new AttnrtRuntime(paths, searchDefaultPaths ? 1 : 0, kernel, disable, debug, numThreads);
    }
  }

  /** The loaded plugins with their probe facts and kernels (kernels in rank order). */
  public java.util.List<PluginInfo> plugins() {
    java.util.List<PluginInfo> plugins = new java.util.ArrayList<>();
    long count = plugin_count();
    for (long p = 0; p < count; ++p) {
      RawPluginInfo raw = new RawPluginInfo();
      try {
        plugin_info(p, raw);
        java.util.Map<String, String> facts = new java.util.LinkedHashMap<>();
        for (long f = 0; f < raw.getNumFacts(); ++f) {
          facts.put(plugin_fact_key(p, f), plugin_fact_value(p, f));
        }
        java.util.List<KernelInfo> kernels = new java.util.ArrayList<>();
        for (long k = 0; k < raw.getNumKernels(); ++k) {
          RawKernelInfo kernel = new RawKernelInfo();
          try {
            plugin_kernel(p, k, kernel);
            kernels.add(new KernelInfo(kernel.getName(), kernel.getPlugin(),
                Attnrt.opKindName(kernel.getOpKind()), kernel.getDeviceType(), kernel.getPriority()));
          } finally {
            kernel.delete();
          }
        }
        plugins.add(new PluginInfo(raw.getName(), raw.getPath(), raw.getVersion(),
            (int) raw.getAbiMajor(), (int) raw.getAbiMinor(), raw.getAvailable() != 0,
            raw.getReason(), facts, kernels));
      } finally {
        raw.delete();
      }
    }
    return java.util.Collections.unmodifiableList(plugins);
  }

  /** Files skipped during discovery, each with the reason. */
  public java.util.List<Diagnostic> diagnostics() {
    java.util.List<Diagnostic> diagnostics = new java.util.ArrayList<>();
    long count = diagnostic_count();
    for (long i = 0; i < count; ++i) {
      RawDiagnostic raw = new RawDiagnostic();
      try {
        diagnostic(i, raw);
        diagnostics.add(new Diagnostic(raw.getPath(), raw.getMessage()));
      } finally {
        raw.delete();
      }
    }
    return java.util.Collections.unmodifiableList(diagnostics);
  }
%}

%typemap(javainterfaces) attnrt_op "AutoCloseable"
%typemap(javacode) attnrt_op %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /**
   * Every kernel of the op ranked against these tensors, in rank order, each "selected",
   * "eligible" or with the reason it is not; no plan is made.
   */
  public java.util.List<Candidate> explain(Tensors inputs, Tensors outputs) {
    java.util.List<Candidate> candidates = new java.util.ArrayList<>();
    try (Explanation explanation = explainNative(inputs, outputs)) {
      long count = explanation.count();
      for (long i = 0; i < count; ++i) {
        RawCandidate raw = new RawCandidate();
        try {
          explanation.candidate(i, raw);
          candidates.add(new Candidate(raw.getKernel(), raw.getPriority(),
              Attnrt.candidateStatusName(raw.getStatus()), raw.getReason()));
        } finally {
          raw.delete();
        }
      }
    }
    return java.util.Collections.unmodifiableList(candidates);
  }
%}

%typemap(javainterfaces) attnrt_plan "AutoCloseable"
%typemap(javacode) attnrt_plan %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /** Name of the kernel this plan runs, e.g. "cpu_x86.gqa.flash.avx2". */
  public String kernel() {
    RawPlanInfo raw = new RawPlanInfo();
    try {
      info(raw);
      return raw.getKernel();
    } finally {
      raw.delete();
    }
  }

  /**
   * A zeroed workspace of {@link #workspaceSize()} bytes (64-byte aligned) for {@link #runIn}:
   * allocated once and passed to every run of this plan instead of the runtime allocating one per
   * run.
   *
   * @return a new workspace, to be closed
   */
  public Workspace newWorkspace() {
    return new Workspace(workspaceSize(), 64);
  }

  /** Workspace bytes the kernel needs (run() allocates them for each run; runIn() takes them). */
  public long workspaceSize() {
    RawPlanInfo raw = new RawPlanInfo();
    try {
      info(raw);
      return raw.getWorkspaceSize();
    } finally {
      raw.delete();
    }
  }

  /** The shape signature the plan was made for, human-readable. */
  public String signature() {
    RawPlanInfo raw = new RawPlanInfo();
    try {
      info(raw);
      return raw.getSignature();
    } finally {
      raw.delete();
    }
  }
%}

%typemap(javainterfaces) attnrt_explanation "AutoCloseable"
%typemap(javacode) attnrt_explanation %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }
%}

%typemap(javainterfaces) attnrt_gqa_attributes "AutoCloseable"
%typemap(javacode) attnrt_gqa_attributes %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /** Attributes with ONNX Runtime's defaults and the two required head counts. */
  public static GqaAttributes of(int numHeads, int kvNumHeads) {
    GqaAttributes attributes = new GqaAttributes();
    attributes.setNumHeads(numHeads);
    attributes.setKvNumHeads(kvNumHeads);
    return attributes;
  }
%}

%typemap(javainterfaces) attnrt_paged_gqa_attributes "AutoCloseable"
%typemap(javacode) attnrt_paged_gqa_attributes %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /**
   * Paged GroupQueryAttention attributes: ONNX Runtime's GQA defaults, the head counts and the
   * block size; kv_layout BSNH. Further GQA attributes: {@code getGqa().setDoRotary(1)}, ...
   *
   * @param numHeads query heads N
   * @param kvNumHeads key/value heads Nkv (N % Nkv == 0)
   * @param blockSize tokens per block, 1..1024
   * @return new attributes, to be closed
   */
  public static PagedGqaAttributes of(int numHeads, int kvNumHeads, int blockSize) {
    PagedGqaAttributes attributes = new PagedGqaAttributes();
    GqaAttributes gqa = attributes.getGqa();
    gqa.setNumHeads(numHeads);
    gqa.setKvNumHeads(kvNumHeads);
    attributes.setBlockSize(blockSize);
    return attributes;
  }
%}

%typemap(javainterfaces) attnrt_sparse_mla_attributes "AutoCloseable"
%typemap(javacode) attnrt_sparse_mla_attributes %{
  /** Releases the native object now. Idempotent; a closed handle fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /**
   * Sparse MLA attributes with the operator's defaults and the given quant mode.
   *
   * @param quantMode the KV token format
   * @return new attributes, to be closed
   */
  public static SparseMlaAttributes of(SparseMlaQuantMode quantMode) {
    SparseMlaAttributes attributes = new SparseMlaAttributes();
    attributes.setQuantMode(quantMode);
    return attributes;
  }
%}

%typemap(javainterfaces) attnrt_bind::Workspace "AutoCloseable"
%typemap(javacode) attnrt_bind::Workspace %{
  /** Frees the memory now. Idempotent; a closed workspace fails every later run. */
  @Override
  public void close() {
    delete();
  }
%}

%typemap(javainterfaces) attnrt_block_pool "AutoCloseable"
%typemap(javacode) attnrt_block_pool %{
  /** Destroys the pool and its sequences now. Idempotent; a closed pool fails every later call. */
  @Override
  public void close() {
    delete();
  }

  /**
   * Grows {@code sequence} by {@code numTokens} tokens, allocating the blocks they need.
   *
   * @param sequence a sequence id
   * @param numTokens tokens to add, at least 0
   * @return the copy to make before writing the new tokens (the sequence's last block was shared
   *     and partly filled: copy-on-write), or {@code null} when none is needed
   * @throws AttnrtException NOT_FOUND (unknown sequence), INVALID_ARGUMENT, OUT_OF_MEMORY (too few
   *     free blocks; the pool is unchanged)
   */
  public BlockCopy append(long sequence, long numTokens) {
    RawBlockCopy raw = new RawBlockCopy();
    try {
      appendNative(sequence, numTokens, raw);
      return raw.getNumTokens() == 0
          ? null : new BlockCopy(raw.getSrcBlock(), raw.getDstBlock(), raw.getNumTokens());
    } finally {
      raw.delete();
    }
  }

  /**
   * The block table of {@code sequences}, one row of {@code maxBlocksPerSeq} block ids per
   * sequence (-1 in unused slots), and seqlens_k = length - 1 of each: the paged GQA op's
   * block_table and seqlens_k inputs for a run whose new tokens are already appended.
   *
   * @param sequences sequence ids, each with at least one token
   * @param maxBlocksPerSeq slots per row, at least the blocks of the longest sequence
   * @return the table and seqlens_k in new direct buffers
   * @throws AttnrtException NOT_FOUND (unknown sequence), INVALID_ARGUMENT (a sequence needs more
   *     slots, or is empty)
   */
  public BlockTable blockTable(long[] sequences, int maxBlocksPerSeq) {
    java.nio.IntBuffer table = BlockTable.ints((long) sequences.length * maxBlocksPerSeq);
    java.nio.IntBuffer seqlensK = BlockTable.ints(sequences.length);
    blockTable(sequences, maxBlocksPerSeq, table, seqlensK);
    return new BlockTable(table, seqlensK, sequences.length, maxBlocksPerSeq);
  }

  /**
   * Writes the block table of {@code sequences} into caller buffers (reused across decode steps).
   *
   * @param sequences sequence ids
   * @param maxBlocksPerSeq slots per row
   * @param table direct int32 buffer of sequences.length * maxBlocksPerSeq values from its position
   * @param seqlensK direct int32 buffer of sequences.length values, or {@code null} (then empty
   *     sequences are allowed)
   * @throws AttnrtException as {@link #blockTable(long[], int)}, or INVALID_ARGUMENT for a buffer
   *     that is not direct or too small
   */
  public void blockTable(long[] sequences, int maxBlocksPerSeq, java.nio.IntBuffer table,
      java.nio.IntBuffer seqlensK) {
    java.nio.LongBuffer ids = java.nio.ByteBuffer.allocateDirect(Math.max(1, sequences.length) * 8)
        .order(java.nio.ByteOrder.nativeOrder()).asLongBuffer();
    ids.put(sequences).rewind();
    try (Tensors arrays = new Tensors(3)) {
      arrays.setNamed(0, "sequences", ids, DType.INT64, sequences.length);
      arrays.setNamed(1, "block_table", table, DType.INT32, sequences.length, maxBlocksPerSeq);
      if (seqlensK != null) {
        arrays.setNamed(2, "seqlens_k", seqlensK, DType.INT32, sequences.length);
      }
      blockTableNative(arrays);
    }
  }

  /**
   * Occupancy of the pool.
   *
   * @return a snapshot of the counters
   */
  public BlockPoolStats stats() {
    return new BlockPoolStats(statNative(0), (int) statNative(1), statNative(2), statNative(3),
        statNative(4), statNative(5), statNative(6), statNative(7), ratioNative(0), ratioNative(1));
  }
%}
