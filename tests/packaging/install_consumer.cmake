# packaging.install_consumer (cmake -P): installs this build into a temporary prefix, moves the
# installed tree (so a path recorded at install time would break the test), then builds and runs
# tests/packaging/consumer/main.c against it twice: with find_package(attnrt)
# (consumer/CMakeLists.txt) and with `cc -std=c11 $(pkg-config --cflags --libs attnrt)`. Each run
# must find the plugins installed beside the installed libattnrt.so.
# -D: BUILD_DIR, CONSUMER_DIR, WORK_DIR, GENERATOR, C_COMPILER, PKG_CONFIG, VERSION, EXTRA_FLAGS
# (compiler and linker flags of the consumer, space-separated: a sanitizer build's sanitizer flags).
cmake_minimum_required(VERSION 3.25)

function(run)
  list(JOIN ARGN " " command_line)
  message(STATUS "\$ ${command_line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${command_line}")
  endif()
endfunction()

# run_consumer(<executable>): runs it with the default plugin search only and checks that it loaded
# plugins from the installed tree and nothing was skipped.
function(run_consumer executable)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=ATTNRT_PLUGIN_PATH --unset=ATTNRT_KERNEL
                          --unset=ATTNRT_DISABLE ${executable}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${executable}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${executable} exited with ${rc}")
  endif()
  if(NOT out MATCHES "attnrt ${VERSION}, plugins: [1-9][0-9]*, diagnostics: 0\n")
    message(FATAL_ERROR "${executable}: expected version ${VERSION}, plugins and no diagnostics")
  endif()
  file(REAL_PATH ${prefix} real_prefix)
  string(FIND "${out}" " ${prefix}/lib/attnrt/plugins/libattnrt_" as_given)
  string(FIND "${out}" " ${real_prefix}/lib/attnrt/plugins/libattnrt_" as_real)
  if(as_given EQUAL -1 AND as_real EQUAL -1)
    message(FATAL_ERROR "${executable}: no plugin loaded from ${prefix}/lib/attnrt/plugins")
  endif()
endfunction()

foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR C_COMPILER VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config was not found when the build was configured (Debian: pkg-config)")
endif()

set(staging ${WORK_DIR}/staging)
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${staging})
file(RENAME ${staging} ${prefix})
foreach(file lib/libattnrt.so lib/cmake/attnrt/attnrtConfig.cmake
             lib/cmake/attnrt/attnrtConfigVersion.cmake lib/cmake/attnrt/attnrtTargets.cmake
             lib/pkgconfig/attnrt.pc include/attnrt/attnrt.h)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()

# find_package(attnrt), through the prefix path only.
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer-build -G ${GENERATOR}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_C_FLAGS=${EXTRA_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
file(STRINGS ${WORK_DIR}/consumer-build/CMakeCache.txt found_dir REGEX "^attnrt_DIR:")
if(NOT found_dir STREQUAL "attnrt_DIR:PATH=${prefix}/lib/cmake/attnrt")
  message(FATAL_ERROR "find_package(attnrt) found ${found_dir}, not the installed tree ${prefix}")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run_consumer(${WORK_DIR}/consumer-build/consumer)

# pkg-config: flags from the moved attnrt.pc; the rpath from its libdir variable.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --modversion attnrt OUTPUT_VARIABLE pc_version
  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion attnrt: ${pc_version}, expected ${VERSION}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs attnrt OUTPUT_VARIABLE pc_flags
  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${PKG_CONFIG} --variable=libdir attnrt OUTPUT_VARIABLE pc_libdir
  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "pkg-config --cflags --libs attnrt: ${pc_flags}")
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(extra_flags UNIX_COMMAND "${EXTRA_FLAGS}")
run(${C_COMPILER} -std=c11 -Wall -Wextra -pedantic -Werror ${extra_flags}
    ${CONSUMER_DIR}/main.c ${pc_flags} -Wl,-rpath,${pc_libdir} -o ${WORK_DIR}/consumer-pkg-config)
run_consumer(${WORK_DIR}/consumer-pkg-config)
