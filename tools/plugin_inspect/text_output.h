// Plain-text formatting helpers: aligned tables and number formats.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

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

}  // namespace plugin_inspect
