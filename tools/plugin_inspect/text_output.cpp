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

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when the bytes there are not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;  // no overlong forms
    if (lead == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

void make_printable(nlohmann::ordered_json& value) {
  if (value.is_string()) {
    value = printable(value.get_ref<const std::string&>());
  } else if (value.is_array()) {
    for (auto& element : value) make_printable(element);
  } else if (value.is_object()) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (auto& [key, element] : value.items()) {
      make_printable(element);
      object[printable(key)] = std::move(element);
    }
    value = std::move(object);
  }
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t length = utf8_sequence_length(text, i);
    const bool control = (c < 0x20 && c != '\t' && c != '\n') || c == 0x7F;
    if (length == 0 || control) {
      char escaped[5];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", c);
      out += escaped;
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string dump_json(const nlohmann::ordered_json& value, int indent) {
  nlohmann::ordered_json copy = value;
  make_printable(copy);
  return copy.dump(indent);
}

}  // namespace plugin_inspect
