#!/usr/bin/env bash
# Fetches ONNX Runtime's C API headers for bindings/onnxruntime/ (libattnrt_onnxruntime.so):
#   scripts/setup-onnxruntime-headers.sh [BUILD_DIR]     (default: build)
# Debian 13 (trixie) packages them as libonnxruntime-dev (1.21, ORT_API_VERSION 21). The package is
# downloaded with a private apt configuration (its own sources list, package lists and cache under
# BUILD_DIR/onnxruntime-headers/apt; the system's apt sources and state are not touched; the
# archive's signature is checked against the Debian archive keyring) and unpacked with dpkg-deb -x
# into BUILD_DIR/onnxruntime-headers. The headers are MIT-licensed (docs/onnxruntime.md).
# Idempotent: does nothing when the headers are already there. Needs apt-get and dpkg-deb (any
# Debian or Ubuntu host) and the debian-archive-keyring package.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
dest="$build_dir/onnxruntime-headers"
header="$dest/usr/include/onnxruntime/onnxruntime_c_api.h"
if [ -f "$header" ]; then
  echo "onnxruntime headers: $dest (present)"
  exit 0
fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ ! -f "$keyring" ]; then
  echo "onnxruntime headers: $keyring is missing (apt-get install debian-archive-keyring)" >&2
  exit 1
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "onnxruntime headers: $tool not found" >&2; exit 1; }
done

apt_dir="$dest/apt"
mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,etc}
echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" >"$apt_dir/etc/sources.list"
apt_options=(
  -o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1" -q)
# As root apt drops privileges to _apt, which cannot write into a private folder: stay root.
if [ "$(id -u)" = 0 ]; then
  apt_options+=(-o "APT::Sandbox::User=root")
fi
apt-get "${apt_options[@]}" update >"$apt_dir/update.log" 2>&1 ||
  { cat "$apt_dir/update.log" >&2; exit 1; }
(cd "$apt_dir" && apt-get "${apt_options[@]}" download libonnxruntime-dev) ||
  { echo "onnxruntime headers: apt-get download libonnxruntime-dev failed" >&2; exit 1; }
deb="$(ls "$apt_dir"/libonnxruntime-dev_*.deb | head -n 1)"
dpkg-deb -x "$deb" "$dest"
rm -rf "$apt_dir/lists" "$apt_dir/cache"  # the package lists (tens of MB) are not needed again
if [ ! -f "$header" ]; then
  echo "onnxruntime headers: $deb has no usr/include/onnxruntime/onnxruntime_c_api.h" >&2
  exit 1
fi
version="$(sed -n 's/^#define ORT_API_VERSION \([0-9]*\)/\1/p' "$header")"
echo "onnxruntime headers: $(basename "$deb") (ORT_API_VERSION $version) in $dest"
