// Overflow-checked byte arithmetic and the memory bound plugin-inspect checks allocations against.
// Every buffer size the tool derives from user input (flags, .npy headers, attribute values) is
// computed here in 64 bits before anything is allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace plugin_inspect {

// a * b and a + b, or nullopt when the result does not fit 64 bits.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b);
std::optional<uint64_t> checked_add(uint64_t a, uint64_t b);
// nullopt in, or overflow: nullopt out.
std::optional<uint64_t> checked_mul(std::optional<uint64_t> a, std::optional<uint64_t> b);
std::optional<uint64_t> checked_add(std::optional<uint64_t> a, std::optional<uint64_t> b);

// "512 B", "1.5 KiB", "137.0 GiB"; nullopt is "more than 16 EiB (overflows 64 bits)".
std::string format_bytes(std::optional<uint64_t> bytes);

// The bound every allocation is checked against: physical memory, sysconf(_SC_PHYS_PAGES) times
// the page size. Swap is not counted: a KV cache that only fits in swap is not a useful run.
uint64_t physical_memory_bytes();

// "; this machine has 23.4 GiB of memory" appended to size errors.
std::string memory_note();

// True when `bytes` is known and at most physical_memory_bytes().
bool fits_in_memory(std::optional<uint64_t> bytes);

}  // namespace plugin_inspect
