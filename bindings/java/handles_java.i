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
   * Every GroupQueryAttention kernel ranked against these tensors, in rank order, each "selected",
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

  /** Workspace bytes the kernel needs (the runtime allocates them for each run). */
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
