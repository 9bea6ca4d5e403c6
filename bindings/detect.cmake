# Finds what the bindings need (included by the top-level CMakeLists.txt before the option
# ATTNRT_BUILD_BINDINGS, whose default is ON only when all of it is here):
#   SWIG >= 4.0, Python 3 with its development files (the module), a JDK with the JNI headers;
# and no ATTNRT_SANITIZE (an instrumented extension cannot load into an uninstrumented interpreter).
# Debian 12: swig python3-dev default-jdk-headless (scripts/setup.sh installs them).
find_package(SWIG 4.0 QUIET COMPONENTS python java)
find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
find_package(Java 11 QUIET COMPONENTS Development)
find_package(JNI QUIET COMPONENTS JVM)
set(ATTNRT_BINDINGS_FOUND OFF)
if(SWIG_FOUND AND Python3_Development.Module_FOUND AND Java_FOUND AND JNI_FOUND AND NOT ATTNRT_SANITIZE)
  set(ATTNRT_BINDINGS_FOUND ON)
endif()
