#include "sizes.h"

#include <unistd.h>

#include <cstdio>

namespace plugin_inspect {

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

std::optional<uint64_t> checked_mul(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b) return std::nullopt;
  return checked_mul(*a, *b);
}

std::optional<uint64_t> checked_add(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b) return std::nullopt;
  return checked_add(*a, *b);
}

std::string format_bytes(std::optional<uint64_t> bytes) {
  if (!bytes) return "more than 16 EiB (the size overflows 64 bits)";
  if (*bytes < 1024) return std::to_string(*bytes) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(*bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.1f %s", value, kUnits[unit]);
  return buffer;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;  // unknown: let the allocator decide
  return checked_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page_size))
      .value_or(UINT64_MAX);
}

std::string memory_note() {
  return "; this machine has " + format_bytes(physical_memory_bytes()) + " of memory";
}

bool fits_in_memory(std::optional<uint64_t> bytes) {
  return bytes && *bytes <= physical_memory_bytes();
}

}  // namespace plugin_inspect
