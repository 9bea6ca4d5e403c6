# CUDA plugins (plugins/cuda_*): built when nvcc is found (ATTNRT_BUILD_CUDA, default ON then), for
# sm_80 and sm_90 only (SASS for both plus PTX, so newer GPUs JIT-compile the sm_90 code). The CUDA
# runtime is linked statically, so the plugins load on machines without a GPU or driver.
include(CheckLanguage)
check_language(CUDA)
set(ATTNRT_CUDA_FOUND OFF)
if(CMAKE_CUDA_COMPILER)
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
