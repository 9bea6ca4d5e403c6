# Sourced by the build scripts: sets ccache_args, the CMake options that compile C and C++ through
# ccache, its cache beside llama.cpp's build (ATTNRT_CACHE_DIR). A clone in another folder (CI's)
# reuses the objects of an earlier build of the same sources: paths are taken relative to the tree
# (CCACHE_BASEDIR) and the folder is not hashed (CCACHE_NOHASHDIR: line tables keep the first
# folder's name). The settings are part of the launcher, so every later build of a folder uses
# them. ATTNRT_CCACHE=0, or no ccache installed: options that clear the launcher.
# Needs $root (the source tree).
if [ "${ATTNRT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  ccache_launcher="env;CCACHE_DIR=${ATTNRT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnrt}/ccache"
  ccache_launcher+=";CCACHE_BASEDIR=$root;CCACHE_NOHASHDIR=1;CCACHE_MAXSIZE=8G;ccache"
  ccache_args=("-DCMAKE_C_COMPILER_LAUNCHER=$ccache_launcher"
    "-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher")
else
  ccache_args=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=)
fi
