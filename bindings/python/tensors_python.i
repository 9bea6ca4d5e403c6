/*
 * tensors_python.i — Python memory into attnrt_tensor descriptors without copies (part of attnrt.i).
 *
 * Accepted: any object with the buffer protocol (numpy arrays, memoryview, array.array, bytearray)
 * and any DLPack producer (__dlpack__: numpy, PyTorch, CuPy, JAX). Buffers are tried first; DLPack
 * capsules may be "dltensor_versioned" (DLPack >= 1.0, asked for with max_version=(1, 0)) or the
 * legacy "dltensor" (numpy 1.24 makes only these). The slot keeps the Py_buffer or the managed tensor
 * until it is cleared, so the memory stays valid (and a numpy array cannot be resized) meanwhile.
 * Strides are passed on in elements; the core rejects what its kernels cannot read, by name.
 */

%{
#include <cstring>

namespace attnrt_bind {

// DLPack's managed-tensor structs (dlpack.h 1.x); attnrt_tensor has DLTensor's layout.
struct DLManagedTensor {
  attnrt_tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  attnrt_tensor dl_tensor;
};
constexpr uint64_t kDLPackFlagReadOnly = 1;

void TensorList::release(size_t index) {
  Slot& slot = slots_[index];
  if (slot.has_view) {
    PyBuffer_Release(&slot.view);
    slot.has_view = false;
  }
  if (slot.managed != nullptr) {
    if (slot.versioned) {
      auto* m = static_cast<DLManagedTensorVersioned*>(slot.managed);
      if (m->deleter) m->deleter(m);
    } else {
      auto* m = static_cast<DLManagedTensor*>(slot.managed);
      if (m->deleter) m->deleter(m);
    }
    slot.managed = nullptr;
  }
  slot.shape.clear();
  slot.strides.clear();
  slot.tensor = attnrt_tensor{};
  pointers_[index] = nullptr;
}

// The attnrt dtype of a struct-module format character with `itemsize` bytes.
static bool dtype_of_format(const char* format, Py_ssize_t itemsize, attnrt_dtype* out,
                            std::string* why) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '>' || f[0] == '!')) {
    *why = "big-endian data (format '" + f + "') is not supported";
    return false;
  }
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  uint8_t code;
  if (f == "e" || f == "f" || f == "d") {
    code = ATTNRT_DTYPE_CODE_FLOAT;
  } else if (f == "b" || f == "h" || f == "i" || f == "l" || f == "q" || f == "n") {
    code = ATTNRT_DTYPE_CODE_INT;
  } else if (f == "B" || f == "H" || f == "I" || f == "L" || f == "Q" || f == "N" || f == "c") {
    code = ATTNRT_DTYPE_CODE_UINT;
  } else {
    *why = "buffer format '" + f + "' has no attnrt dtype";
    return false;
  }
  *out = attnrt_dtype{code, static_cast<uint8_t>(itemsize * 8), 1};
  return true;
}

static std::string type_name(PyObject* object) { return Py_TYPE(object)->tp_name; }

// The Python exception now set, as text (and cleared).
static std::string take_python_error() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "unknown error";
  PyObject* str = value ? PyObject_Str(value) : (type ? PyObject_Str(type) : nullptr);
  if (str != nullptr) {
    const char* utf8 = PyUnicode_AsUTF8(str);
    if (utf8 != nullptr) text = utf8;
    Py_DECREF(str);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

// Calls object.__dlpack__(max_version=(1, 0)), falling back to object.__dlpack__() for producers
// older than the 2023 array API. Returns a new reference or nullptr with a Python error set.
static PyObject* call_dlpack_once(PyObject* object);

// A torch tensor that requires grad refuses __dlpack__; its detach() is the same memory without the
// autograd record (what a kernel call reads anyway), so it is exported instead.
static PyObject* call_dlpack(PyObject* object) {
  PyObject* capsule = call_dlpack_once(object);
  if (capsule != nullptr) return capsule;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* requires_grad = PyObject_GetAttrString(object, "requires_grad");
  const bool retry = requires_grad == Py_True;
  Py_XDECREF(requires_grad);
  PyErr_Clear();
  if (!retry) {
    PyErr_Restore(type, value, traceback);
    return nullptr;
  }
  PyObject* detached = PyObject_CallMethod(object, "detach", nullptr);
  if (detached != nullptr) capsule = call_dlpack_once(detached);
  Py_XDECREF(detached);
  if (capsule == nullptr) {
    PyErr_Restore(type, value, traceback);  // the original error says more
    return nullptr;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return capsule;
}

static PyObject* call_dlpack_once(PyObject* object) {
  PyObject* method = PyObject_GetAttrString(object, "__dlpack__");
  if (method == nullptr) return nullptr;
  PyObject* args = PyTuple_New(0);
  PyObject* kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 0);
  PyObject* capsule = (args && kwargs) ? PyObject_Call(method, args, kwargs) : nullptr;
  if (capsule == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    capsule = PyObject_Call(method, args, nullptr);
  }
  Py_XDECREF(kwargs);
  Py_XDECREF(args);
  Py_DECREF(method);
  return capsule;
}

// `object`.view(uintN) when object.dtype is one of ml_dtypes' types with a DLPack code (bfloat16,
// float8_e4m3fn, float8_e5m2, float8_e8m0fnu), with that code in *dtype; nullptr (no Python error set) otherwise.
static PyObject* view_extension_dtype(PyObject* object, attnrt_dtype* dtype) {
  static const struct {
    const char* name;
    const char* view_as;
    uint8_t code;
    uint8_t bits;
  } kTypes[] = {{"bfloat16", "uint16", ATTNRT_DTYPE_CODE_BFLOAT, 16},
                {"float8_e4m3fn", "uint8", ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN, 8},
                {"float8_e5m2", "uint8", ATTNRT_DTYPE_CODE_FLOAT8_E5M2, 8},
                {"float8_e8m0fnu", "uint8", ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU, 8}};
  PyObject* np_dtype = PyObject_GetAttrString(object, "dtype");
  PyObject* np_name = np_dtype ? PyObject_GetAttrString(np_dtype, "name") : nullptr;
  const char* name = np_name ? PyUnicode_AsUTF8(np_name) : nullptr;
  PyObject* viewed = nullptr;
  for (const auto& t : kTypes) {
    if (name != nullptr && std::strcmp(name, t.name) == 0) {
      viewed = PyObject_CallMethod(object, "view", "s", t.view_as);
      *dtype = attnrt_dtype{t.code, t.bits, 1};
      break;
    }
  }
  Py_XDECREF(np_name);
  Py_XDECREF(np_dtype);
  if (viewed == nullptr) PyErr_Clear();
  return viewed;
}

bool TensorList::set_object(size_t index, const char* name, PyObject* object, bool writable,
                            int dtype_code, int dtype_bits) {
  const std::string label = name ? name : "tensor";
  if (!check_index(index, name)) return false;
  release(index);
  if (object == nullptr || object == Py_None) return true;
  const bool has_override = dtype_code >= 0;
  const attnrt_dtype override_dtype{static_cast<uint8_t>(has_override ? dtype_code : 0),
                                    static_cast<uint8_t>(dtype_bits), 1};
  const attnrt_device cpu{ATTNRT_DEVICE_CPU, 0};

  if (PyObject_CheckBuffer(object)) {
    Slot& slot = slots_[index];
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, &slot.view, flags) != 0) {
      // numpy arrays of ml_dtypes' bfloat16 / float8 types have no buffer format: borrow their
      // bytes as unsigned integers of the same width and describe them with the DLPack code.
      std::string error = take_python_error();
      attnrt_dtype viewed_dtype{};
      PyObject* viewed = has_override ? nullptr : view_extension_dtype(object, &viewed_dtype);
      if (viewed != nullptr) {
        bool ok = set_object(index, name, viewed, writable, viewed_dtype.code, viewed_dtype.bits);
        Py_DECREF(viewed);  // the Py_buffer keeps its own reference
        return ok;
      }
      fail(ATTNRT_ERROR_INVALID_ARGUMENT,
           label + ": " + (writable ? "a writable buffer is needed: " : "") + error);
      return false;
    }
    slot.has_view = true;
    const Py_buffer& v = slot.view;
    attnrt_dtype dtype = override_dtype;
    std::string why;
    if (!has_override && !dtype_of_format(v.format, v.itemsize, &dtype, &why)) {
      release(index);
      fail(ATTNRT_ERROR_INVALID_ARGUMENT, label + ": " + why);
      return false;
    }
    std::vector<int64_t> shape(v.shape, v.shape + v.ndim);
    std::vector<int64_t> strides;
    // Byte strides to element strides; compact row-major ones are left out (NULL, DLPack <= 1.1).
    if (v.strides != nullptr) {
      bool compact = true;
      Py_ssize_t expected = v.itemsize;
      for (int d = v.ndim - 1; d >= 0; --d) {
        if (v.shape[d] != 1 && v.strides[d] != expected) compact = false;
        expected *= v.shape[d];
      }
      if (!compact) {
        for (int d = 0; d < v.ndim; ++d) {
          if (v.strides[d] % v.itemsize != 0) {
            release(index);
            fail(ATTNRT_ERROR_INVALID_ARGUMENT,
                 label + ": byte stride " + std::to_string(v.strides[d]) + " of dimension " +
                     std::to_string(d) + " is not a multiple of the element size " +
                     std::to_string(v.itemsize));
            return false;
          }
          strides.push_back(v.strides[d] / v.itemsize);
        }
      }
    }
    return describe(index, name, v.buf, cpu, dtype, std::move(shape), std::move(strides), 0);
  }

  if (PyObject_HasAttrString(object, "__dlpack__")) {
    PyObject* capsule = call_dlpack(object);
    if (capsule == nullptr) {
      fail(ATTNRT_ERROR_INVALID_ARGUMENT, label + ": __dlpack__ failed: " + take_python_error());
      return false;
    }
    attnrt_tensor dl{};
    void* managed = nullptr;
    bool versioned = false;
    std::string why;
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
      auto* m = static_cast<DLManagedTensorVersioned*>(
          PyCapsule_GetPointer(capsule, "dltensor_versioned"));
      PyCapsule_SetName(capsule, "used_dltensor_versioned");
      managed = m;
      versioned = true;
      dl = m->dl_tensor;
      if (m->version.major != 1) {
        why = "DLPack major version " + std::to_string(m->version.major) + " is not supported (1)";
      } else if (writable && (m->flags & kDLPackFlagReadOnly)) {
        why = "the DLPack tensor is read-only, an output must be writable";
      }
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      PyCapsule_SetName(capsule, "used_dltensor");
      managed = m;
      dl = m->dl_tensor;
    } else {
      why = "__dlpack__ returned neither a \"dltensor_versioned\" nor a \"dltensor\" capsule";
    }
    Py_DECREF(capsule);
    Slot& slot = slots_[index];
    slot.managed = managed;
    slot.versioned = versioned;
    if (!why.empty()) {
      release(index);
      fail(ATTNRT_ERROR_INVALID_ARGUMENT, label + ": " + why);
      return false;
    }
    std::vector<int64_t> shape(dl.shape, dl.shape + (dl.shape ? dl.ndim : 0));
    std::vector<int64_t> strides;
    if (dl.strides != nullptr) {
      // DLPack >= 1.2 always gives strides; compact row-major ones are left out as for buffers.
      bool compact = true;
      int64_t expected = 1;
      for (int d = dl.ndim - 1; d >= 0; --d) {
        if (shape[d] != 1 && dl.strides[d] != expected) compact = false;
        expected *= shape[d];
      }
      if (!compact) strides.assign(dl.strides, dl.strides + dl.ndim);
    }
    return describe(index, name, dl.data, dl.device, has_override ? override_dtype : dl.dtype,
                    std::move(shape), std::move(strides), dl.byte_offset);
  }

  fail(ATTNRT_ERROR_INVALID_ARGUMENT,
       label + ": expected a numpy array, an object with the buffer protocol or a DLPack producer "
               "(__dlpack__), got " + type_name(object));
  return false;
}

}  // namespace attnrt_bind
%}

%extend attnrt_bind::TensorList {
  /**
   * Fills every position from `values`, a list or tuple by position (None: absent; positions past
   * its end are emptied), as set() does for each; `op_kind` and `outputs` name the positions in
   * errors (attnrt_op_input_name / attnrt_op_output_name); bit i of `written_inputs` demands
   * writable memory at input i (inputs the op writes, such as paged KV pools). On an error every
   * position is emptied.
   * The one-call path of Plan.run: no Python-level work per tensor.
   */
  void assign(PyObject* values, bool writable, int32_t op_kind, bool outputs,
              unsigned long long written_inputs = 0) {
    $self->clear_all();
    if (!PyList_Check(values) && !PyTuple_Check(values)) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(outputs ? "outputs" : "inputs") +
                        ": expected a list or tuple by position, got " + Py_TYPE(values)->tp_name);
      return;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (static_cast<size_t>(n) > $self->size()) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::to_string(n) + (outputs ? " outputs" : " inputs") +
                        " given, the op has " + std::to_string($self->size()));
      return;
    }
    PyObject** items = PySequence_Fast_ITEMS(values);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (items[i] == Py_None) continue;
      const char* name = outputs ? attnrt_op_output_name(op_kind, static_cast<size_t>(i))
                                 : attnrt_op_input_name(op_kind, static_cast<size_t>(i));
      const bool written = writable || (i < 64 && ((written_inputs >> i) & 1) != 0);
      if (!$self->set_object(static_cast<size_t>(i), name, items[i], written, -1, 0)) {
        $self->clear_all();
        return;
      }
    }
  }

  /**
   * Borrows `object` at position `index` without copying: an object with the buffer protocol (tried
   * first) or a DLPack producer; None empties the position. `writable` demands writable memory
   * (outputs). `dtype_code`/`dtype_bits` >= 0 override the element type (bfloat16 or float8 data
   * viewed as uint16/uint8). `name` is used in error messages.
   */
  void set(size_t index, const char* name, PyObject* object, bool writable = false,
           int dtype_code = -1, int dtype_bits = 0) {
    $self->set_object(index, name, object, writable, dtype_code, dtype_bits);
  }
}
