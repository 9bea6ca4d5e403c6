#!/usr/bin/env python3
"""Writes a tiny DeepSeek-V4 checkpoint with seeded random weights that vLLM 0.32 loads.

OUT_DIR gets model.safetensors, config.json (architectures ["DeepseekV4ForCausalLM"],
model_type "deepseek_v4": vLLM's registry maps it to vllm.models.deepseek_v4, its config class
is vllm.transformers_utils.configs.deepseek_v4.DeepseekV4Config) and generation_config.json. No
tokenizer: load it with skip_tokenizer_init=True and token-id prompts (as
scripts/vllm_reference_run.py does).

Tensor names follow DeepSeek's own checkpoint layout (embed, layers.N.attn.wq_a, ...,
layers.N.ffn.experts.E.w1, head, hc_head_*), which vLLM's DeepSeek-V4 weight mapper translates.
By default the linear layers are unquantized bfloat16 (no quantization_config), which vLLM's
loader accepts; --fp8 writes the attention and expert linear weights as float8_e4m3fn in
128x128 blocks with float32 inverse scales (``.scale``; DeepSeek-V4-Flash-Base's layout,
expert_dtype "fp8", quantization_config quant_method "fp8", weight_block_size [128, 128]).

Layer kinds come from --compress-ratios, one entry per layer: 0 sliding-window only (SWA), 4
C4A (compressed KV every 4 tokens with the lightning indexer choosing --index-topk of them), 128
C128A (compressed KV every 128 tokens, all of them attended). The default [0, 4, 128] has one of
each. What vLLM 0.32's CPU kernels fix: head_dim 512 with a 64-dim rotary part (the compressor
and flash_mla_with_kvcache_cpu), index_head_dim 128, index_topk 512 (topk_transform_512_cpu), so
C4A layers use the learned top-k only once a request has more than 512 * 4 = 2048 tokens;
below that every compressed token is attended; the router (biased_topk_cpu) takes 64, 128, 256
or 384 routed experts with 6 or 8 per token; the CPU GEMMs want output widths that are multiples
of 32. The smallest model found to run on vLLM 0.32 (CPU, bfloat16): --hidden 32 --heads 1
--o-groups 1 --index-heads 1 --q-lora-rank 32 --o-lora-rank 32 --moe-intermediate 32 (64 experts,
6 per token). The defaults are a little larger (--hidden 64 --heads 4 --o-groups 2
--index-heads 4 --q-lora-rank 64, 2.8M parameters) so that per-head and per-group handling is
exercised.

--fp8 writes DeepSeek-V4-Flash-Base's layout, but vLLM 0.32's CPU FP8 block GEMMs
(CPUFp8BlockScaledMMKernel, CPUFp8W8A8BlockScaledMMKernel) need AMX tiles: on CPUs without them
vLLM refuses to build the model ("Failed to find a kernel that can implement the ScaledMM linear
layer"), so that layout has not been run through vLLM here.

Weights are drawn from a normal distribution at initialization scale (std 0.02 by default), norm
weights are 1.0, the hyper-connection scales 1.0 and their biases 0, the attention sinks
N(0, --sink-std). Each tensor has its own generator, seeded from --seed and the tensor's name.
Queries and keys are RMS-normalized per head by the model, so attention logits have a spread of
about 1 at any --std.

Usage: make-deepseek-v4-checkpoint.py OUT_DIR [--seed N] [--compress-ratios 0,4,128] [--hidden 64]
         [--heads 4] [--index-heads 4] [--experts 64] [--fp8] ...
Needs only numpy (the safetensors file is written directly).
"""

import argparse
import json
import os
import sys

import numpy as np

from checkpoint_io import normal, write_safetensors

HEAD_DIM = 512  # DeepseekV4CPUCompressor asserts head_dim in (512, 128) (512: main attention)
ROPE_DIM = 64  # cpu_sparse.py: _ROPE_DIM
INDEX_HEAD_DIM = 128  # the indexer compressor and K cache layout
INDEX_TOPK = 512  # SparseAttnIndexer.forward_cpu: topk_transform_512_cpu only
FP8_BLOCK = 128
GEMM_MULTIPLE = 32  # vLLM's CPU GEMMs ("tinygemm requires N to be 32x")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compress-ratios", default="0,4,128",
                   help="one per layer: 0 (SWA only), 4 (C4A) or 128 (C128A)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4, help="num_attention_heads")
    p.add_argument("--o-groups", type=int, default=2, help="output projection groups")
    p.add_argument("--q-lora-rank", type=int, default=64)
    p.add_argument("--o-lora-rank", type=int, default=32)
    p.add_argument("--index-heads", type=int, default=4, help="index_n_heads")
    p.add_argument("--index-topk", type=int, default=INDEX_TOPK,
                   help="index_topk (vLLM 0.32's CPU indexer takes 512 only)")
    p.add_argument("--experts", type=int, default=64,
                   help="n_routed_experts (vLLM's biased_topk_cpu: 64, 128, 256 or 384)")
    p.add_argument("--experts-per-token", type=int, default=6, help="num_experts_per_tok (6 or 8)")
    p.add_argument("--moe-intermediate", type=int, default=32)
    p.add_argument("--sliding-window", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--max-pos", type=int, default=8192)
    p.add_argument("--hc-mult", type=int, default=4, help="hyper-connection streams")
    p.add_argument("--std", type=float, default=0.02, help="std of linear/embedding weights")
    p.add_argument("--lm-head-std", type=float, default=None, help="std of the output layer")
    p.add_argument("--sink-std", type=float, default=1.0, help="std of the attention sink logits")
    p.add_argument("--fp8", action="store_true",
                   help="attention and expert linear weights as block-quantized float8_e4m3fn")
    a = p.parse_args(argv)
    try:
        a.ratios = [int(x) for x in a.compress_ratios.split(",")]
    except ValueError:
        p.error(f"--compress-ratios: expected comma-separated integers, got {a.compress_ratios!r}")
    bad = [r for r in a.ratios if r not in (0, 4, 128)]
    if not a.ratios or bad:
        p.error(f"--compress-ratios: each must be 0, 4 or 128, got {a.compress_ratios!r}")
    for name in ("hidden", "heads", "o_groups", "q_lora_rank", "o_lora_rank", "index_heads",
                 "index_topk", "experts", "experts_per_token", "moe_intermediate",
                 "sliding_window", "vocab", "max_pos", "hc_mult"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.heads % a.o_groups:
        p.error(f"--heads ({a.heads}) must be a multiple of --o-groups ({a.o_groups})")
    if a.experts_per_token > a.experts:
        p.error(f"--experts-per-token ({a.experts_per_token}) exceeds --experts ({a.experts})")
    for name in ("hidden", "q_lora_rank", "o_lora_rank", "moe_intermediate"):
        if getattr(a, name) % GEMM_MULTIPLE:
            p.error(f"--{name.replace('_', '-')} must be a multiple of {GEMM_MULTIPLE} (vLLM's CPU "
                    f"GEMMs), got {getattr(a, name)}")
    if a.experts not in (64, 128, 256, 384) or a.experts_per_token not in (6, 8):
        p.error(f"--experts {a.experts} --experts-per-token {a.experts_per_token}: vLLM's CPU router "
                f"(biased_topk_cpu) takes 64, 128, 256 or 384 experts with 6 or 8 per token")
    if a.fp8:
        for name in ("hidden", "q_lora_rank", "o_lora_rank", "moe_intermediate"):
            if getattr(a, name) % FP8_BLOCK:
                p.error(f"--fp8 needs --{name.replace('_', '-')} to be a multiple of {FP8_BLOCK}, "
                        f"got {getattr(a, name)}")
    a.lm_head_std = a.std if a.lm_head_std is None else a.lm_head_std
    return a


def _e4m3_table():
    """The 127 non-negative finite float8_e4m3fn values (bit patterns 0x00..0x7E)."""
    codes = np.arange(0x7F, dtype=np.uint32)
    exp, man = codes >> 3, (codes & 7).astype(np.float64)
    return np.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * 2.0 ** (exp.astype(np.float64) - 7))


E4M3_VALUES = _e4m3_table()
E4M3_MAX = float(E4M3_VALUES[-1])  # 448


def to_e4m3_bits(x):
    """float32 (|x| <= 448) -> float8_e4m3fn bit patterns, round to nearest (ties to the even
    code)."""
    mag = np.abs(x.astype(np.float64)).ravel()
    hi = np.clip(np.searchsorted(E4M3_VALUES, mag), 1, len(E4M3_VALUES) - 1)
    lo = hi - 1
    d_lo, d_hi = mag - E4M3_VALUES[lo], E4M3_VALUES[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code |= np.where(np.signbit(x.ravel()), 0x80, 0).astype(np.uint8)
    return code.reshape(x.shape)


def quantize_fp8_blocks(w):
    """w [out, in] float32 -> (float8_e4m3fn bits [out, in], float32 scale_inv [ceil(out/128),
    ceil(in/128)]) with w ~= e4m3 * scale_inv per 128x128 block (amax maps to 448)."""
    out_dim, in_dim = w.shape
    bo, bi = -(-out_dim // FP8_BLOCK), -(-in_dim // FP8_BLOCK)
    padded = np.zeros((bo * FP8_BLOCK, bi * FP8_BLOCK), np.float32)
    padded[:out_dim, :in_dim] = w
    blocks = padded.reshape(bo, FP8_BLOCK, bi, FP8_BLOCK)
    amax = np.abs(blocks).max(axis=(1, 3))
    scale_inv = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    q = blocks / scale_inv[:, None, :, None]
    bits = to_e4m3_bits(q.reshape(padded.shape))[:out_dim, :in_dim]
    return bits, scale_inv


class Tensors:
    def __init__(self, a):
        self.a, self.items = a, []

    def linear(self, name, shape, std=None, quantize=False):
        """A linear layer's weight: bfloat16, or with --fp8 and quantize float8_e4m3fn blocks plus
        name's ``.scale`` (float32 inverse block scales)."""
        w = normal(self.a.seed, name, shape, self.a.std if std is None else std)
        if quantize and self.a.fp8:
            bits, scale_inv = quantize_fp8_blocks(w)
            self.items.append((name, bits, "f8"))
            self.items.append((name[: -len(".weight")] + ".scale", scale_inv, "f32"))
        else:
            self.items.append((name, w, "bf16"))

    def const(self, name, shape, value, kind="bf16"):
        self.items.append((name, np.full(shape, value, np.float32), kind))

    def random(self, name, shape, std, kind="f32"):
        self.items.append((name, normal(self.a.seed, name, shape, std), kind))


def make_tensors(a):
    H, hc = a.hidden, a.hc_mult
    mix_hc, hc_dim = (2 + hc) * hc, hc * a.hidden
    t = Tensors(a)
    t.linear("embed.weight", (a.vocab, H))
    for i, ratio in enumerate(a.ratios):
        p = f"layers.{i}."
        t.linear(p + "attn.wq_a.weight", (a.q_lora_rank, H), quantize=True)
        t.const(p + "attn.q_norm.weight", (a.q_lora_rank,), 1.0)
        t.linear(p + "attn.wq_b.weight", (a.heads * HEAD_DIM, a.q_lora_rank), quantize=True)
        t.linear(p + "attn.wkv.weight", (HEAD_DIM, H), quantize=True)
        t.const(p + "attn.kv_norm.weight", (HEAD_DIM,), 1.0)
        t.linear(p + "attn.wo_a.weight", (a.o_groups * a.o_lora_rank, a.heads * HEAD_DIM // a.o_groups),
                 quantize=True)
        t.linear(p + "attn.wo_b.weight", (H, a.o_groups * a.o_lora_rank), quantize=True)
        t.random(p + "attn.attn_sink", (a.heads,), a.sink_std)
        if ratio > 1:
            coff = 2 if ratio == 4 else 1  # C4A compresses overlapping windows
            c = p + "attn.compressor."
            t.linear(c + "wkv.weight", (coff * HEAD_DIM, H))
            t.linear(c + "wgate.weight", (coff * HEAD_DIM, H))
            t.random(c + "ape", (ratio, coff * HEAD_DIM), a.std)
            t.const(c + "norm.weight", (HEAD_DIM,), 1.0)
        if ratio == 4:
            x = p + "attn.indexer."
            t.linear(x + "wq_b.weight", (a.index_heads * INDEX_HEAD_DIM, a.q_lora_rank), quantize=True)
            t.linear(x + "weights_proj.weight", (a.index_heads, H))
            t.linear(x + "compressor.wkv.weight", (2 * INDEX_HEAD_DIM, H))
            t.linear(x + "compressor.wgate.weight", (2 * INDEX_HEAD_DIM, H))
            t.random(x + "compressor.ape", (ratio, 2 * INDEX_HEAD_DIM), a.std)
            t.const(x + "compressor.norm.weight", (INDEX_HEAD_DIM,), 1.0)
        t.const(p + "attn_norm.weight", (H,), 1.0)
        t.const(p + "ffn_norm.weight", (H,), 1.0)
        for kind in ("attn", "ffn"):
            t.random(f"{p}hc_{kind}_fn", (mix_hc, hc_dim), a.std)
            t.const(f"{p}hc_{kind}_base", (mix_hc,), 0.0, "f32")
            t.const(f"{p}hc_{kind}_scale", (3,), 1.0, "f32")
        f = p + "ffn."
        t.linear(f + "gate.weight", (a.experts, H))
        t.const(f + "gate.bias", (a.experts,), 0.0, "f32")  # noaux_tc's e_score_correction_bias
        I = a.moe_intermediate
        for e in [*range(a.experts), "shared"]:
            q = f"{f}experts.{e}." if e != "shared" else f + "shared_experts."
            t.linear(q + "w1.weight", (I, H), quantize=True)
            t.linear(q + "w3.weight", (I, H), quantize=True)
            t.linear(q + "w2.weight", (H, I), quantize=True)
    t.const("norm.weight", (H,), 1.0)
    t.linear("head.weight", (a.vocab, H), std=a.lm_head_std)
    t.random("hc_head_fn", (hc, hc_dim), a.std)
    t.const("hc_head_base", (hc,), 0.0, "f32")
    t.const("hc_head_scale", (1,), 1.0, "f32")
    return t.items


def make_config(a):
    c = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": a.vocab,
        "hidden_size": a.hidden,
        "num_hidden_layers": len(a.ratios),
        "compress_ratios": a.ratios,
        "num_attention_heads": a.heads,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "qk_rope_head_dim": ROPE_DIM,
        "q_lora_rank": a.q_lora_rank,
        "o_lora_rank": a.o_lora_rank,
        "o_groups": a.o_groups,
        "sliding_window": a.sliding_window,
        "index_n_heads": a.index_heads,
        "index_head_dim": INDEX_HEAD_DIM,
        "index_topk": a.index_topk,
        "hc_mult": a.hc_mult,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "n_routed_experts": a.experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": a.experts_per_token,
        "moe_intermediate_size": a.moe_intermediate,
        "num_hash_layers": 0,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "swiglu_limit": 10.0,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": a.max_pos,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 16,
            "original_max_position_embeddings": max(1, a.max_pos // 16),
            "beta_fast": 32,
            "beta_slow": 1,
        },
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "initializer_range": a.std,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_cache": True,
    }
    if a.fp8:
        c["expert_dtype"] = "fp8"
        c["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
        }
    return c


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    tensors = make_tensors(a)
    write_safetensors(os.path.join(a.out_dir, "model.safetensors"), tensors)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(make_config(a), f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    n = sum(int(arr.size) for _, arr, _ in tensors)
    kinds = {0: "SWA", 4: "C4A", 128: "C128A"}
    print(f"make-deepseek-v4-checkpoint: layers {[kinds[r] for r in a.ratios]}, {n / 1e6:.1f}M parameters, "
          f"{'fp8 block-quantized' if a.fp8 else 'bfloat16'} linear weights -> {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
