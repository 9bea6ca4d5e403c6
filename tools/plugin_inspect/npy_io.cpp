// xtensor's npy header writer comes with its std::regex-based reader, whose inlined std::function
// members trip GCC 12's -Wmaybe-uninitialized false positive in optimized and sanitizer builds. It
// must be silenced before any standard header is seen, hence first in this file.
#if !defined(__clang__)  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "npy_io.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xnpy.hpp>

#include "dtypes.h"
#include "errors.h"
#include "sizes.h"

namespace plugin_inspect {
namespace {

namespace fs = std::filesystem;

struct NpyType {
  const char* descr;
  attnrt_dtype dtype;
};

// descr strings as numpy writes them on a little-endian machine (single bytes also as '<i1').
constexpr NpyType kNpyTypes[] = {
    {"<f4", kFloat32}, {"<f2", kFloat16}, {"|i1", kInt8}, {"|u1", kUInt8},
    {"<i4", kInt32},   {"<i8", kInt64},   {"<i1", kInt8}, {"<u1", kUInt8},
};

// A header this long is not a header numpy wrote (numpy itself refuses more than 10000 bytes by
// default); the limit keeps a corrupt length field from making the tool read a huge file whole.
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

std::string describe_descr(const std::string& descr) {
  if (descr == "<f8") return "float64 ('<f8')";
  if (descr == "|b1") return "bool ('|b1')";
  if (!descr.empty() && descr[0] == '>') return "big-endian '" + descr + "'";
  return "'" + descr + "'";
}

std::string file_type_name(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a plain file";
  }
}

// Python-literal text shown in messages: printable, at most 40 characters.
std::string excerpt(std::string_view text) {
  std::string shown;
  for (char c : text.substr(0, 40)) {
    shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return text.size() > 40 ? shown + "..." : shown;
}

// The header dict, as numpy.lib.format writes it:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (5, 1, 64), }
// Exactly these three keys, each once; strings in single or double quotes; the shape a tuple of
// non-negative integers ("(5,)" for one dimension, "()" for a scalar).
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  NpyHeader parse() {
    NpyHeader header;
    bool has_descr = false, has_fortran = false, has_shape = false;
    skip_space();
    expect('{', "the header dict to start with '{'");
    skip_space();
    while (!at('}')) {
      const std::string key = parse_string("a quoted key");
      skip_space();
      expect(':', "':' after '" + key + "'");
      skip_space();
      bool* seen = nullptr;
      if (key == "descr") {
        if (at('[')) fail("structured dtypes (a descr list) are not supported");
        header.descr = parse_string("a dtype string for 'descr'");
        seen = &has_descr;
      } else if (key == "fortran_order") {
        header.fortran_order = parse_bool();
        seen = &has_fortran;
      } else if (key == "shape") {
        header.shape = parse_shape();
        seen = &has_shape;
      } else {
        fail("unexpected key '" + key + "' (a .npy header has descr, fortran_order, shape)");
      }
      if (*seen) fail("key '" + key + "' appears twice");
      *seen = true;
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        fail("expected ',' or '}' after the value of '" + key + "', got '" + rest() + "'");
      }
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header dict: '" + rest() + "'");
    for (const auto& [name, present] :
         {std::pair{"descr", has_descr}, {"fortran_order", has_fortran}, {"shape", has_shape}}) {
      if (!present) fail(std::string("missing key '") + name + "'");
    }
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw ToolError(file_ + ": invalid .npy header: " + message);
  }
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  std::string rest() const { return excerpt(text_.substr(pos_)); }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void expect(char c, const std::string& what) {
    if (!at(c)) fail("expected " + what + ", got '" + rest() + "'");
    ++pos_;
  }
  std::string parse_string(const std::string& what) {
    if (!at('\'') && !at('"')) fail("expected " + what + ", got '" + rest() + "'");
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  bool parse_bool() {
    for (const auto& [word, value] : {std::pair{"True", true}, {"False", false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        return value;
      }
    }
    fail("expected True or False for 'fortran_order', got '" + rest() + "'");
  }
  std::vector<int64_t> parse_shape() {
    expect('(', "a tuple for 'shape'");
    std::vector<int64_t> shape;
    bool trailing_comma = false;
    skip_space();
    while (!at(')')) {
      shape.push_back(parse_dimension(shape.size()));
      skip_space();
      trailing_comma = false;
      if (at(',')) {
        ++pos_;
        trailing_comma = true;
        skip_space();
      } else if (!at(')')) {
        fail("expected ',' or ')' in 'shape' after dimension " + std::to_string(shape.size() - 1) +
             ", got '" + rest() + "'");
      }
    }
    ++pos_;  // ')'
    if (shape.size() == 1 && !trailing_comma) {
      fail("'shape' (" + std::to_string(shape[0]) + ") is not a tuple (a 1-d shape is written (" +
           std::to_string(shape[0]) + ",))");
    }
    return shape;
  }
  int64_t parse_dimension(std::size_t index) {
    const std::size_t start = pos_;
    std::size_t end = start;
    while (end < text_.size() && text_[end] != ',' && text_[end] != ')' && text_[end] != ' ') {
      ++end;
    }
    std::string_view token = text_.substr(start, end - start);
    const std::string label = "dimension " + std::to_string(index) + " of 'shape'";
    if (token.size() > 1 && token.back() == 'L') token.remove_suffix(1);  // Python 2 long
    if (token.empty()) fail(label + " is empty, expected a non-negative integer");
    if (token.front() == '-') {
      fail(label + " is " + excerpt(token) + ", expected a non-negative integer");
    }
    uint64_t value = 0;
    for (char c : token) {
      if (c < '0' || c > '9') {
        fail(label + " is " + excerpt(token) + ", expected a non-negative integer");
      }
      const std::optional<uint64_t> next =
          checked_add(checked_mul(value, 10).value_or(UINT64_MAX), static_cast<uint64_t>(c - '0'));
      if (!next || *next > static_cast<uint64_t>(INT64_MAX)) {
        fail(label + " is " + excerpt(token) + ", more than the largest dimension " +
             std::to_string(INT64_MAX));
      }
      value = *next;
    }
    pos_ = end;
    return static_cast<int64_t>(value);
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

uint64_t read_le(const unsigned char* bytes, int count) {
  uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

}  // namespace

void require_regular_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // follows symlinks
  if (ec || !fs::exists(status)) {
    throw ToolError(path.string() + ": cannot open (" +
                    (ec ? ec.message() : std::string("no such file")) + ")");
  }
  if (!fs::is_regular_file(status)) {
    throw ToolError(path.string() + ": not a regular file (" + file_type_name(status.type()) + ")");
  }
}

void require_writable_file_path(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status) || fs::is_regular_file(status)) return;
  throw ToolError(path.string() + ": exists and is not a regular file (" +
                  file_type_name(status.type()) + "); refusing to write to it");
}

HostTensor load_npy(const fs::path& path) {
  const std::string name = path.string();
  require_regular_file(path);
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw ToolError(name + ": cannot read its size (" + ec.message() + ")");
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw ToolError(name + ": cannot open (" + std::strerror(errno) + ")");

  // Preamble: magic "\x93NUMPY", major and minor version, header length (2 bytes for version 1,
  // 4 bytes for versions 2 and 3), all little-endian.
  unsigned char preamble[12] = {};
  const uint64_t available = std::min<uint64_t>(file_size, sizeof(preamble));
  stream.read(reinterpret_cast<char*>(preamble), static_cast<std::streamsize>(available));
  if (file_size < 10 || std::memcmp(preamble, "\x93NUMPY", 6) != 0) {
    throw ToolError(name + ": not a .npy file (" +
                    (file_size < 10 ? "only " + std::to_string(file_size) + " bytes"
                                    : std::string("no \\x93NUMPY magic")) +
                    ")");
  }
  const int major = preamble[6], minor = preamble[7];
  if (major < 1 || major > 3) {
    throw ToolError(name + ": unsupported .npy format version " + std::to_string(major) + "." +
                    std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  const uint64_t length_bytes = major == 1 ? 2 : 4;
  const uint64_t header_start = 8 + length_bytes;
  if (file_size < header_start) {
    throw ToolError(name + ": truncated .npy preamble (" + std::to_string(file_size) + " bytes)");
  }
  const uint64_t header_length = read_le(preamble + 8, static_cast<int>(length_bytes));
  if (header_length > file_size - header_start) {
    throw ToolError(name + ": .npy header length " + std::to_string(header_length) +
                    " exceeds the file (" + std::to_string(file_size - header_start) +
                    " bytes after the preamble)");
  }
  if (header_length > kMaxHeaderBytes) {
    throw ToolError(name + ": .npy header length " + std::to_string(header_length) +
                    " is larger than the limit " + std::to_string(kMaxHeaderBytes));
  }
  std::string header_text(static_cast<std::size_t>(header_length), '\0');
  stream.seekg(static_cast<std::streamoff>(header_start));
  stream.read(header_text.data(), static_cast<std::streamsize>(header_length));
  if (!stream) throw ToolError(name + ": cannot read the .npy header");
  const NpyHeader header = HeaderParser(header_text, name).parse();

  const NpyType* type = nullptr;
  for (const NpyType& candidate : kNpyTypes) {
    if (header.descr == candidate.descr) type = &candidate;
  }
  if (!type) {
    throw ToolError(name + ": unsupported dtype " + describe_descr(header.descr) +
                    " (supported: float32, float16, int8, uint8, int32, int64)");
  }
  if (header.fortran_order) {
    throw ToolError(name +
                    ": Fortran-order arrays are not supported (save a C-order "
                    "array, e.g. np.ascontiguousarray)");
  }

  // Size: checked against the file before anything is allocated.
  const uint64_t data_offset = header_start + header_length;
  const uint64_t data_bytes = file_size - data_offset;
  const std::optional<uint64_t> expected = HostTensor::checked_nbytes(type->dtype, header.shape);
  const std::string what = "shape " + shape_string(header.shape) + " " + dtype_name(type->dtype);
  if (!expected) {
    throw ToolError(name + ": " + what + " needs more than 2^64 bytes (the size overflows); " +
                    "the file has " + std::to_string(data_bytes) + " bytes of data");
  }
  if (*expected > data_bytes) {
    throw ToolError(name + ": truncated .npy data: " + what + " needs " +
                    std::to_string(*expected) + " bytes, the file has " +
                    std::to_string(data_bytes) + " after its " + std::to_string(data_offset) +
                    "-byte header");
  }
  if (*expected < data_bytes) {
    throw ToolError(name + ": " + std::to_string(data_bytes - *expected) +
                    " bytes of trailing data after the array: " + what + " needs " +
                    std::to_string(*expected) + " bytes, the file has " +
                    std::to_string(data_bytes) + " after its " + std::to_string(data_offset) +
                    "-byte header");
  }

  HostTensor tensor(type->dtype, header.shape, /*allocate=*/true, path.filename().string());
  stream.seekg(static_cast<std::streamoff>(data_offset));
  stream.read(static_cast<char*>(tensor.data()), static_cast<std::streamsize>(*expected));
  if (!stream || static_cast<uint64_t>(stream.gcount()) != *expected) {
    throw ToolError(name + ": read " + std::to_string(stream.gcount()) + " of " +
                    std::to_string(*expected) + " data bytes (did the file change?)");
  }
  return tensor;
}

void save_npy(const fs::path& path, const HostTensor& tensor) {
  const char* descr = nullptr;
  for (const NpyType& type : kNpyTypes) {
    if (!descr && same_dtype(type.dtype, tensor.dtype())) descr = type.descr;
  }
  if (!descr) {
    throw ToolError(path.string() + ": dtype " + dtype_name(tensor.dtype()) +
                    " cannot be stored in .npy");
  }
  require_writable_file_path(path);
  std::ofstream stream(path, std::ios::binary);
  if (!stream) throw ToolError(path.string() + ": cannot create (" + std::strerror(errno) + ")");
  const std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
  xt::detail::write_header(stream, descr, false, shape);
  stream.write(static_cast<const char*>(tensor.data()),
               static_cast<std::streamsize>(tensor.nbytes()));
  if (!stream) throw ToolError(path.string() + ": write failed");
}

}  // namespace plugin_inspect
