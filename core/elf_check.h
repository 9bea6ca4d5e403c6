// Checks a candidate plugin file before it is handed to the dynamic loader. dlopen maps every
// loadable segment of a shared library as the program headers describe it; a segment that extends
// past the end of a truncated file is mapped anyway and the first access to it kills the process
// with SIGBUS. A file for another machine only gets dlopen's misleading "cannot open shared object
// file". Both are refused here with a reason that says what is wrong with the file.
#pragma once

#include <string>

namespace attnrt::core {

// "" when `path` is an ELF shared library for this machine whose headers and segments lie within
// the file; otherwise why not ("truncated: ...", "built for aarch64, this runtime runs on x86-64").
std::string CheckElfFile(const std::string& path);

}  // namespace attnrt::core
