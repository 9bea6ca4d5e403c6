"""Negative control of the DeepSeek-V4 end-to-end check (scripts/test-vllm.sh): importing this
module makes attnrt's DeepSeek-V4 sparse attention (attnrt._vllm_deepseek_v4, reached through the
route attnrt.vllm installs with ATTNRT_VLLM=1) drop one key per query row: the row's newest window
key (its own token). Everything else is as in attnrt. The check must fail with it, or it could not
tell a wrong attention from a right one. Run the driver in-process after importing it:
  python -c 'import runpy, sys, attnrt_dsv4_controls; sys.argv = sys.argv[1:];
             runpy.run_path(sys.argv[0], run_name="__main__")' scripts/vllm_reference_run.py ...
"""
import torch

from attnrt import _vllm_deepseek_v4

_keep_all_keys = _vllm_deepseek_v4.flash_mla_with_kvcache


def _drop_newest_window_key(out, q, window_cache_2d, window_slots, *args, **kwargs):
    slots = window_slots.clone()
    valid = slots >= 0
    # The last valid column of each row (the window runs oldest to newest, -1 tail after it).
    last = (valid.cumsum(1) == valid.sum(1, keepdim=True)) & valid
    slots[last] = -1
    return _keep_all_keys(out, q, window_cache_2d, slots.contiguous(), *args, **kwargs)


_vllm_deepseek_v4.flash_mla_with_kvcache = _drop_newest_window_key
