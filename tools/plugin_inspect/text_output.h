// Plain-text formatting helpers: aligned tables and number formats.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace plugin_inspect {

// Columns padded to their widest cell, separated by two spaces; the header row is followed by a
// dashed rule.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  void add_row(std::vector<std::string> row);
  void print(std::ostream& os, const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point with `digits` decimals ("12.345").
std::string format_fixed(double value, int digits);
// Scientific with 2 decimals ("1.23e-07"); "inf"/"nan" as such.
std::string format_error(double value);

// `text` with every byte that is not part of a valid UTF-8 sequence (RFC 3629: no overlong forms,
// surrogates or code points past U+10FFFF) and every control character other than tab and newline
// written as \xNN (two upper-case hex digits); everything else unchanged, so valid text passes
// through as it is. File names, paths and messages from the runtime and its plugins are bytes: a
// file named "libattnrt_\xff.so" is listed as such instead of failing the JSON output.
std::string printable(std::string_view text);

// `value` as JSON text indented by `indent`, every string in it (keys too) made printable first:
// the one way plugin-inspect writes JSON, so no output fails on bytes that are not UTF-8.
std::string dump_json(const nlohmann::ordered_json& value, int indent = 2);

}  // namespace plugin_inspect
