# What `cmake --install` adds for consumers of libattnrt.so (included by the top-level
# CMakeLists.txt):
#   lib/cmake/attnrt/   find_package(attnrt) → attnrt::attnrt (libattnrt.so; its include folder is
#                       the ABI headers' include/) and attnrt::abi (the headers alone, for plugins);
#   lib/pkgconfig/attnrt.pc   `pkg-config --cflags --libs attnrt`.
# Both locate the tree from their own folder, never from the prefix given at install time, so an
# installed tree still works after it is moved (or unpacked from a wheel).
include(CMakePackageConfigHelpers)

set(ATTNRT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnrt)
set(ATTNRT_INSTALL_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/${ATTNRT_PLUGIN_SUBDIR})
set(ATTNRT_PACKAGE_BINARY_DIR ${PROJECT_BINARY_DIR}/package)

install(EXPORT attnrtTargets NAMESPACE attnrt:: DESTINATION ${ATTNRT_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnrtConfig.cmake.in
  ${ATTNRT_PACKAGE_BINARY_DIR}/attnrtConfig.cmake
  INSTALL_DESTINATION ${ATTNRT_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR ATTNRT_INSTALL_PLUGIN_DIR)
# The soname carries the major version (libattnrt.so.0), so any release of the same major will do.
write_basic_package_version_file(${ATTNRT_PACKAGE_BINARY_DIR}/attnrtConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${ATTNRT_PACKAGE_BINARY_DIR}/attnrtConfig.cmake
  ${ATTNRT_PACKAGE_BINARY_DIR}/attnrtConfigVersion.cmake
  DESTINATION ${ATTNRT_CMAKE_INSTALL_DIR})

# attnrt.pc names its prefix relative to ${pcfiledir}, the folder pkg-config found it in.
file(RELATIVE_PATH ATTNRT_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/attnrt.pc.in ${ATTNRT_PACKAGE_BINARY_DIR}/attnrt.pc
  @ONLY)
install(FILES ${ATTNRT_PACKAGE_BINARY_DIR}/attnrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
