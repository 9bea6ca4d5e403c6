# Cross build for 64-bit Arm Linux with Debian's cross compiler (g++-aarch64-linux-gnu) and the
# arm64 multiarch libraries (libboost-program-options-dev:arm64, libgtest-dev:arm64,
# libgmock-dev:arm64, libcpuinfo0:arm64; scripts/test-arm.sh installs them). Test executables run
# through qemu-aarch64 user emulation (CMAKE_CROSSCOMPILING_EMULATOR), so ctest works unchanged.
#   cmake -S . -B build-arm --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: arm64 libraries live in /usr/lib/aarch64-linux-gnu beside the host's, and headers in
# /usr/include are shared, so the root stays / and find_* looks in the aarch64 library folders.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# libcpuinfo-dev is not Multi-Arch: same (its CMake files differ per architecture), so the arm64
# package cannot be installed beside the host's; the host's header serves both architectures and
# the arm64 runtime library is linked by its soname file.
set(CPUINFO_LIBRARY /usr/lib/aarch64-linux-gnu/libcpuinfo.so.0 CACHE FILEPATH "arm64 libcpuinfo")
# The arm64 loader and libraries are installed in / (multiarch), where qemu finds them by default;
# QEMU_LD_PREFIX or -L are needed only for a separate sysroot.
find_program(ATTNRT_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${ATTNRT_QEMU_AARCH64})
# xtensor (plugin-inspect) is header-only, but Debian's libxtensor-dev:arm64 cannot be installed
# (its xtl-dev dependency is Architecture: all without Multi-Arch: foreign); the host package's
# CMake files describe the same headers.
set(xtensor_DIR /usr/lib/x86_64-linux-gnu/cmake/xtensor CACHE PATH "xtensor (header-only)")
