#include "text_output.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

namespace plugin_inspect {

TextTable::TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void TextTable::add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

void TextTable::print(std::ostream& os, const std::string& indent) const {
  std::vector<std::size_t> widths;
  for (const auto& row : rows_) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  const auto print_row = [&](const std::vector<std::string>& row) {
    std::string line = indent;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    os << line << "\n";
  };
  print_row(rows_.front());
  std::vector<std::string> rule;
  for (std::size_t width : widths) rule.emplace_back(width, '-');
  print_row(rule);
  for (std::size_t r = 1; r < rows_.size(); ++r) print_row(rows_[r]);
}

std::string format_fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string format_error(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.2e", value);
  return buffer;
}

}  // namespace plugin_inspect
