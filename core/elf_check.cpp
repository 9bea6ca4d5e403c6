#include "core/elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

namespace attnrt::core {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "attnrt: add this machine's ELF e_machine to core/elf_check.cpp"
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif

std::string MachineName(uint16_t machine) {
  switch (machine) {
    case EM_X86_64:
      return "x86-64";
    case EM_AARCH64:
      return "aarch64";
    case EM_386:
      return "i386";
    case EM_ARM:
      return "32-bit arm";
    case EM_RISCV:
      return "riscv";
    case EM_PPC64:
      return "ppc64";
    case EM_S390:
      return "s390";
    default:
      return "ELF machine " + std::to_string(machine);
  }
}

std::string ErrnoText() { return std::error_code(errno, std::generic_category()).message(); }

// Reads exactly `size` bytes at `offset`; false at end of file or on error.
bool ReadAt(int fd, void* buffer, size_t size, uint64_t offset) {
  auto* out = static_cast<unsigned char*>(buffer);
  while (size > 0) {
    const ssize_t got = pread(fd, out, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    size -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

// "[begin, begin + length) lies within a file of `file_size` bytes", without wrapping.
bool WithinFile(uint64_t begin, uint64_t length, uint64_t file_size) {
  return begin <= file_size && length <= file_size - begin;
}

std::string Bytes(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

std::string CheckOpenFile(int fd) {
  struct stat info {};
  if (fstat(fd, &info) != 0) return std::string("cannot read file status: ") + ErrnoText();
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  unsigned char ident[EI_NIDENT] = {};
  const bool has_ident = ReadAt(fd, ident, sizeof(ident), 0);
  if (file_size < SELFMAG || std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return "not an ELF file (it does not start with the ELF magic bytes); a plugin is a shared "
           "library";
  }
  if (!has_ident) return "truncated: " + Bytes(file_size) + ", shorter than an ELF header";
  if (ident[EI_CLASS] != ELFCLASS64) {
    return std::string(ident[EI_CLASS] == ELFCLASS32 ? "a 32-bit" : "an unknown-class") +
           " ELF file; this runtime loads 64-bit shared libraries";
  }
  if (ident[EI_DATA] != kHostData) {
    return std::string("an ELF file of the other byte order (") +
           (ident[EI_DATA] == ELFDATA2MSB ? "big" : "not little") + "-endian)";
  }
  Elf64_Ehdr header{};
  if (!ReadAt(fd, &header, sizeof(header), 0)) {
    return "truncated: " + Bytes(file_size) + ", shorter than the " + Bytes(sizeof(header)) +
           " of an ELF header";
  }
  if (header.e_machine != kHostMachine) {
    return "built for " + MachineName(header.e_machine) + ", this runtime runs on " +
           MachineName(kHostMachine);
  }
  if (header.e_type != ET_DYN) {
    return "an ELF " +
           std::string(header.e_type == ET_EXEC ? "executable"
                       : header.e_type == ET_REL
                           ? "relocatable object"
                           : "file of type " + std::to_string(header.e_type)) +
           ", not a shared library";
  }
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(Elf64_Phdr)) {
    return "malformed ELF header: " + std::to_string(header.e_phnum) + " program headers of " +
           Bytes(header.e_phentsize) + ", expected program headers of " + Bytes(sizeof(Elf64_Phdr));
  }
  const uint64_t table_bytes = uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
  if (!WithinFile(header.e_phoff, table_bytes, file_size)) {
    return "truncated: the program headers end past the end of the file (" + Bytes(file_size) + ")";
  }
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  if (!ReadAt(fd, segments.data(), table_bytes, header.e_phoff)) {
    return "cannot read the program headers: " + std::string(ErrnoText());
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const Elf64_Phdr& segment = segments[i];
    if (segment.p_filesz == 0) continue;
    if (segment.p_type == PT_LOAD && segment.p_filesz > segment.p_memsz) {
      return "malformed ELF file: loadable segment " + std::to_string(i) +
             " has more bytes in the "
             "file (" +
             std::to_string(segment.p_filesz) + ") than in memory (" +
             std::to_string(segment.p_memsz) + ")";
    }
    if (!WithinFile(segment.p_offset, segment.p_filesz, file_size)) {
      const bool wraps = segment.p_offset > UINT64_MAX - segment.p_filesz;
      return "truncated: " + std::string(segment.p_type == PT_LOAD ? "loadable " : "") +
             "segment " + std::to_string(i) + " (file bytes " + std::to_string(segment.p_offset) +
             " to " +
             (wraps ? "beyond 2^64" : std::to_string(segment.p_offset + segment.p_filesz)) +
             ") extends past the end of the file (" + Bytes(file_size) + ")";
    }
  }
  return {};
}

}  // namespace

std::string CheckElfFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open: ") + ErrnoText();
  std::string problem = CheckOpenFile(fd);
  close(fd);
  return problem;
}

}  // namespace attnrt::core
