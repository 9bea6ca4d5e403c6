# CUDA plugins (plugins/cuda_*): built when nvcc is found (ATTNRT_BUILD_CUDA, default ON then), for
# sm_80 and sm_90 only (SASS for both plus PTX, so newer GPUs JIT-compile the sm_90 code). The CUDA
# runtime is linked statically, so the plugins load on machines without a GPU or driver.
include(CheckLanguage)
# The toolkit's default location counts as found even when it is not on PATH.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
# Off by default in the libFuzzer build: it fuzzes the CPU plugin, and its Clang sanitizer linker
# flags (-shared-libsan) are not nvcc's. Off by default when cross-compiling (the host's nvcc
# targets the host).
set(ATTNRT_CUDA_FOUND OFF)
if(CMAKE_CUDA_COMPILER AND NOT ATTNRT_BUILD_FUZZERS AND NOT CMAKE_CROSSCOMPILING)
  set(ATTNRT_CUDA_FOUND ON)
endif()
option(ATTNRT_BUILD_CUDA "Build the CUDA plugins cuda_xqa and cuda_flash (needs nvcc)"
  ${ATTNRT_CUDA_FOUND})
if(ATTNRT_BUILD_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "attnrt: CUDA plugins for architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
