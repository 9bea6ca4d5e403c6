# Sourced by scripts/setup-vllm.sh and scripts/setup-genai.sh (not run by itself).
# share_test_venv_torch VENV BUILD_DIR TORCH_VERSION: the test venv (BUILD_DIR/venv, made by
# scripts/test.sh) already holds torch==TORCH_VERSION and its ~3 GB of CUDA libraries; when it does,
# for the same Python version, its site-packages is appended to VENV's path (VENV's own packages
# come first), so pip finds torch installed instead of downloading it again. Returns 1 (nothing
# done) otherwise.
share_test_venv_torch() {
  local venv="$1" shared="$2/venv" torch_version="$3" site own
  [ -x "$shared/bin/python" ] || return 1
  [ "$("$shared/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" = \
    "$torch_version" ] || return 1
  [ "$("$shared/bin/python" -c 'import sys; print(sys.version_info[:2])')" = \
    "$("$venv/bin/python" -c 'import sys; print(sys.version_info[:2])')" ] || return 1
  site="$("$shared/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$site" >"$own/attnrt-shared-torch.pth"
}
