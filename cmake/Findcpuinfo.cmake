# Finds libcpuinfo and defines the imported target cpuinfo::cpuinfo.
# Debian 12's own cpuinfo-targets.cmake computes a wrong install prefix (/usr/lib/lib/...) and fails,
# so this module (found first through CMAKE_MODULE_PATH) locates the header and library directly.
find_path(CPUINFO_INCLUDE_DIR cpuinfo.h)
find_library(CPUINFO_LIBRARY cpuinfo)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(cpuinfo REQUIRED_VARS CPUINFO_LIBRARY CPUINFO_INCLUDE_DIR)
if(cpuinfo_FOUND AND NOT TARGET cpuinfo::cpuinfo)
  add_library(cpuinfo::cpuinfo UNKNOWN IMPORTED)
  set_target_properties(cpuinfo::cpuinfo PROPERTIES
    IMPORTED_LOCATION "${CPUINFO_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CPUINFO_INCLUDE_DIR}")
endif()
mark_as_advanced(CPUINFO_INCLUDE_DIR CPUINFO_LIBRARY)
