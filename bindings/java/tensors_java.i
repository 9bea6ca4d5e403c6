/*
 * tensors_java.i — direct NIO buffers into attnrt_tensor descriptors without copies (part of
 * attnrt.i). The address comes from JNI GetDirectBufferAddress; the Java side (Tensors.set) checks
 * that the buffer is direct and in native byte order, turns its position into a byte offset and keeps
 * a reference to it so the memory outlives the call.
 */

%{
namespace attnrt_bind {
void TensorList::release(size_t index) {
  Slot& slot = slots_[index];
  slot.shape.clear();
  slot.strides.clear();
  slot.tensor = attnrt_tensor{};
  pointers_[index] = nullptr;
}
}  // namespace attnrt_bind
%}

// void* ATTNRT_DIRECT_BUFFER: a java.nio.Buffer; its native address, or NULL when not direct.
%typemap(jni) void* ATTNRT_DIRECT_BUFFER "jobject"
%typemap(jtype) void* ATTNRT_DIRECT_BUFFER "java.nio.Buffer"
%typemap(jstype) void* ATTNRT_DIRECT_BUFFER "java.nio.Buffer"
%typemap(javain) void* ATTNRT_DIRECT_BUFFER "$javainput"
%typemap(in) void* ATTNRT_DIRECT_BUFFER {
  $1 = $input ? jenv->GetDirectBufferAddress($input) : nullptr;
}

// (const long long* SHAPE, int32_t NDIM): a long[] copied for the call (shapes are small).
%typemap(jni) (const long long* SHAPE, int32_t NDIM) "jlongArray"
%typemap(jtype) (const long long* SHAPE, int32_t NDIM) "long[]"
%typemap(jstype) (const long long* SHAPE, int32_t NDIM) "long[]"
%typemap(javain) (const long long* SHAPE, int32_t NDIM) "$javainput"
%typemap(in) (const long long* SHAPE, int32_t NDIM) (std::vector<long long> extents) {
  if ($input != nullptr) {
    jsize n = jenv->GetArrayLength($input);
    std::vector<jlong> values(static_cast<size_t>(n));
    if (n > 0) jenv->GetLongArrayRegion($input, 0, n, values.data());
    extents.assign(values.begin(), values.end());
  }
  $1 = extents.data();
  $2 = static_cast<int32_t>(extents.size());
}

%javamethodmodifiers attnrt_bind::TensorList::setDirect "";
%extend attnrt_bind::TensorList {
  /** Describes `byte_capacity` bytes at `buffer` (a direct buffer) as a compact tensor. */
  void setDirect(size_t index, const char* name, void* ATTNRT_DIRECT_BUFFER, int64_t byte_capacity,
                 int64_t byte_offset, int32_t dtype_code, int32_t dtype_bits, const long long* SHAPE,
                 int32_t NDIM) {
    const std::string label = name ? name : "tensor";
    if (!$self->check_index(index, name)) return;
    $self->clear(index);
    if (ATTNRT_DIRECT_BUFFER == nullptr) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, label + ": the buffer is not direct "
                        "(allocate it with ByteBuffer.allocateDirect)");
      return;
    }
    int64_t elements = 1;
    for (int32_t d = 0; d < NDIM; ++d) {
      if (SHAPE[d] < 0) {
        attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, label + ": extent " + std::to_string(SHAPE[d]) +
                          " of dimension " + std::to_string(d) + " is negative");
        return;
      }
      elements *= SHAPE[d];
    }
    const int64_t needed = (elements * dtype_bits + 7) / 8;
    if (byte_offset < 0 || byte_offset + needed > byte_capacity) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT,
                        label + ": the shape needs " + std::to_string(needed) + " bytes from position byte " +
                        std::to_string(byte_offset) + ", the buffer holds " + std::to_string(byte_capacity));
      return;
    }
    attnrt_dtype dtype{static_cast<uint8_t>(dtype_code), static_cast<uint8_t>(dtype_bits), 1};
    $self->describe(index, name, ATTNRT_DIRECT_BUFFER, attnrt_device{ATTNRT_DEVICE_CPU, 0}, dtype,
                    std::vector<int64_t>(SHAPE, SHAPE + NDIM), {}, static_cast<uint64_t>(byte_offset));
  }
}

%typemap(javainterfaces) attnrt_bind::TensorList "AutoCloseable"
%typemap(javacode) attnrt_bind::TensorList %{
  /** The buffers borrowed by position: they must outlive every plan and run that uses them. */
  private final java.util.Map<Long, java.nio.Buffer> borrowed = new java.util.HashMap<>();

  /** An empty list of the 16 GroupQueryAttention input positions ({@link GqaInput}). */
  public static Tensors gqaInputs() {
    return new Tensors(GqaInput.NUM_INPUTS.swigValue());
  }

  /** An empty list of the 4 GroupQueryAttention output positions ({@link GqaOutput}). */
  public static Tensors gqaOutputs() {
    return new Tensors(GqaOutput.NUM_OUTPUTS.swigValue());
  }

  /**
   * Borrows a direct buffer at position {@code index} as a compact row-major tensor, without a copy.
   * The tensor starts at the buffer's position. A ByteBuffer may hold any dtype; another buffer type
   * must match the dtype's width (FloatBuffer: FLOAT32, ShortBuffer: FLOAT16 or BFLOAT16, IntBuffer:
   * INT32, LongBuffer: INT64). Multi-byte data must be in native byte order
   * ({@code ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())}).
   *
   * @param index the position (e.g. {@code GqaInput.QUERY.swigValue()})
   * @param buffer a direct buffer; {@code null} empties the position
   * @param dtype the element type
   * @param shape the extents, outermost first (int4: elements, the last one even)
   * @return this list
   * @throws AttnrtException INVALID_ARGUMENT when the buffer is not direct, in the wrong byte order,
   *     of the wrong type or too small for the shape
   */
  public Tensors set(long index, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(index, "tensor " + index, buffer, dtype, shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a GroupQueryAttention input position. */
  public Tensors set(GqaInput input, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(input.swigValue(), input.name().toLowerCase(java.util.Locale.ROOT), buffer, dtype,
        shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a GroupQueryAttention output position. */
  public Tensors set(GqaOutput output, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(output.swigValue(), output.name().toLowerCase(java.util.Locale.ROOT), buffer,
        dtype, shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a paged GroupQueryAttention input. */
  public Tensors set(PagedGqaInput input, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(input.swigValue(), input.name().toLowerCase(java.util.Locale.ROOT), buffer, dtype,
        shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a paged GroupQueryAttention output. */
  public Tensors set(PagedGqaOutput output, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(output.swigValue(), output.name().toLowerCase(java.util.Locale.ROOT), buffer,
        dtype, shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a sparse MLA (or metadata op) input. */
  public Tensors set(SparseMlaInput input, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(input.swigValue(), input.name().toLowerCase(java.util.Locale.ROOT), buffer, dtype,
        shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a sparse MLA output. */
  public Tensors set(SparseMlaOutput output, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(output.swigValue(), output.name().toLowerCase(java.util.Locale.ROOT), buffer,
        dtype, shape);
  }

  /** An empty list of the 17 paged GroupQueryAttention input positions ({@link PagedGqaInput}). */
  public static Tensors pagedGqaInputs() {
    return new Tensors(PagedGqaInput.NUM_INPUTS.swigValue());
  }

  /** An empty list of the 2 paged GroupQueryAttention output positions ({@link PagedGqaOutput}). */
  public static Tensors pagedGqaOutputs() {
    return new Tensors(PagedGqaOutput.NUM_OUTPUTS.swigValue());
  }

  /** An empty list of the 12 packed varlen paged GQA input positions ({@link PagedGqaVarlenInput}). */
  public static Tensors pagedGqaVarlenInputs() {
    return new Tensors(PagedGqaVarlenInput.NUM_INPUTS.swigValue());
  }

  /** An empty list of the packed varlen paged GQA output position ({@link PagedGqaVarlenOutput}). */
  public static Tensors pagedGqaVarlenOutputs() {
    return new Tensors(PagedGqaVarlenOutput.NUM_OUTPUTS.swigValue());
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a packed varlen paged GQA input. */
  public Tensors set(PagedGqaVarlenInput input, java.nio.Buffer buffer, DType dtype, long... shape) {
    return setNamed(input.swigValue(), input.name().toLowerCase(java.util.Locale.ROOT), buffer, dtype,
        shape);
  }

  /** {@link #set(long, java.nio.Buffer, DType, long...)} at a packed varlen paged GQA output. */
  public Tensors set(PagedGqaVarlenOutput output, java.nio.Buffer buffer, DType dtype,
      long... shape) {
    return setNamed(output.swigValue(), output.name().toLowerCase(java.util.Locale.ROOT), buffer,
        dtype, shape);
  }

  /** An empty list of the 18 sparse MLA input positions ({@link SparseMlaInput}), also the
   *  metadata op's. */
  public static Tensors sparseMlaInputs() {
    return new Tensors(SparseMlaInput.NUM_INPUTS.swigValue());
  }

  /** An empty list of the 2 sparse MLA output positions ({@link SparseMlaOutput}). */
  public static Tensors sparseMlaOutputs() {
    return new Tensors(SparseMlaOutput.NUM_OUTPUTS.swigValue());
  }

  Tensors setNamed(long index, String name, java.nio.Buffer buffer, DType dtype,
      long... shape) {
    if (buffer == null) {
      clear(index);
      return this;
    }
    int unit = elementBytes(buffer);
    if (!buffer.isDirect()) {
      throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(),
          name + ": the buffer is not direct (allocate it with ByteBuffer.allocateDirect)");
    }
    if (unit != 1 && unit * 8 != dtype.bits()) {
      throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(), name + ": a "
          + buffer.getClass().getSimpleName() + " holds " + (unit * 8) + "-bit elements, "
          + dtype + " has " + dtype.bits());
    }
    java.nio.ByteOrder order = byteOrder(buffer);
    if (dtype.bits() > 8 && order != null && order != java.nio.ByteOrder.nativeOrder()) {
      throw new AttnrtException(Status.ERROR_INVALID_ARGUMENT.swigValue(), name + ": the buffer is "
          + order + ", attnrt reads " + java.nio.ByteOrder.nativeOrder()
          + " (use .order(ByteOrder.nativeOrder()))");
    }
    setDirect(index, name, buffer, (long) buffer.capacity() * unit, (long) buffer.position() * unit,
        dtype.code(), dtype.bits(), shape);
    borrowed.put(index, buffer);
    return this;
  }

  /** Empties position {@code index} (an absent input or output). */
  public Tensors clear(long index) {
    clearNative(index);
    borrowed.remove(index);
    return this;
  }

  /** Empties every position. */
  public Tensors clearAll() {
    clearAllNative();
    borrowed.clear();
    return this;
  }

  /** Releases the native list (not the buffers, which belong to the caller). */
  @Override
  public void close() {
    borrowed.clear();
    delete();
  }

  private static int elementBytes(java.nio.Buffer buffer) {
    if (buffer instanceof java.nio.ByteBuffer) return 1;
    if (buffer instanceof java.nio.ShortBuffer || buffer instanceof java.nio.CharBuffer) return 2;
    if (buffer instanceof java.nio.IntBuffer || buffer instanceof java.nio.FloatBuffer) return 4;
    return 8;  // LongBuffer, DoubleBuffer
  }

  private static java.nio.ByteOrder byteOrder(java.nio.Buffer buffer) {
    if (buffer instanceof java.nio.ByteBuffer) return ((java.nio.ByteBuffer) buffer).order();
    if (buffer instanceof java.nio.ShortBuffer) return ((java.nio.ShortBuffer) buffer).order();
    if (buffer instanceof java.nio.CharBuffer) return ((java.nio.CharBuffer) buffer).order();
    if (buffer instanceof java.nio.IntBuffer) return ((java.nio.IntBuffer) buffer).order();
    if (buffer instanceof java.nio.FloatBuffer) return ((java.nio.FloatBuffer) buffer).order();
    if (buffer instanceof java.nio.LongBuffer) return ((java.nio.LongBuffer) buffer).order();
    if (buffer instanceof java.nio.DoubleBuffer) return ((java.nio.DoubleBuffer) buffer).order();
    return null;
  }
%}
