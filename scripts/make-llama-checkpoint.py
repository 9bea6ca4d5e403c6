#!/usr/bin/env python3
"""Writes a small checkpoint with seeded random weights that vLLM loads from a local folder.

OUT_DIR gets model.safetensors, config.json and generation_config.json; no tokenizer (load it
with skip_tokenizer_init=True and token-id prompts) unless --tokenizer is given: then also a
word-level tokenizer.json (tokens "<unk>", "<s>", "</s>", then "t3", "t4", ... up to the vocabulary
size; split on whitespace) and tokenizer_config.json, which transformers' AutoTokenizer loads
offline (ONNX Runtime GenAI's model builder needs a tokenizer in the folder).

Weights are drawn from a normal distribution at initialization scale (std 0.02 by default), norm
weights are 1.0. Each tensor has its own generator, seeded from --seed and the tensor's name, so a
tensor's values do not depend on the other options (adding layers leaves the first layers as they
were).

Architectures:
  llama   LlamaForCausalLM (default). --sliding-window N gives the layers named by
          --sliding-layers a sliding window of N tokens (config layer_types).
  gemma2  Gemma2ForCausalLM: attention logit soft-capping (--attn-softcap), final logit
          soft-capping (--final-softcap), sliding window on alternate layers (every even
          layer, as Gemma 2 does), tied embeddings, norms stored as offsets from 1.

With std 0.02 throughout, attention logits have a spread of about 512 * std^2 (0.2): attention
is close to uniform, and so is the output distribution (logit spread std * sqrt(hidden), 0.45).
--qk-std (query and key projections) and --lm-head-std (output layer; gemma2: --embed-std) make
them sharper: e.g. --qk-std 0.08 --lm-head-std 0.2 (gemma2: --qk-std 0.08 --embed-std 0.05).

Usage: make-llama-checkpoint.py OUT_DIR [--seed N] [--layers 4] [--dtype float32|bfloat16] ...
Needs only numpy (the safetensors file is written directly).
"""

import argparse
import json
import os
import sys

import numpy as np

from checkpoint_io import normal, write_safetensors, write_word_level_tokenizer


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--arch", choices=["llama", "gemma2"], default="llama")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=1408)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--max-pos", type=int, default=4096)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-eps", type=float, default=1e-5)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--std", type=float, default=0.02, help="std of linear/embedding weights")
    p.add_argument("--qk-std", type=float, default=None, help="std of q/k projections")
    p.add_argument("--lm-head-std", type=float, default=None, help="std of the output layer")
    p.add_argument("--embed-std", type=float, default=None, help="std of the embedding (gemma2: also the output layer)")
    p.add_argument("--sliding-window", type=int, default=None, help="window in tokens")
    p.add_argument(
        "--sliding-layers",
        choices=["all", "even", "odd"],
        default="even",
        help="llama: which layers get the window (gemma2: always even)",
    )
    p.add_argument("--attn-softcap", type=float, default=50.0, help="gemma2 only")
    p.add_argument("--final-softcap", type=float, default=30.0, help="gemma2 only")
    p.add_argument("--tokenizer", action="store_true", help="also write a word-level tokenizer")
    a = p.parse_args(argv)
    for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_pos"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.heads % a.kv_heads:
        p.error(f"--heads ({a.heads}) must be a multiple of --kv-heads ({a.kv_heads})")
    if a.tokenizer and a.vocab < len(SPECIAL_TOKENS) + 1:
        p.error(f"--tokenizer needs --vocab of at least {len(SPECIAL_TOKENS) + 1}, got {a.vocab}")
    if a.sliding_window is not None and a.sliding_window <= 0:
        p.error(f"--sliding-window must be positive, got {a.sliding_window}")
    if a.arch == "gemma2" and a.lm_head_std is not None:
        p.error("--lm-head-std: gemma2 ties the output layer to the embedding (use --embed-std)")
    a.qk_std = a.std if a.qk_std is None else a.qk_std
    a.lm_head_std = a.std if a.lm_head_std is None else a.lm_head_std
    a.embed_std = a.std if a.embed_std is None else a.embed_std
    return a


def sliding_flags(a):
    if a.arch == "gemma2":
        return [i % 2 == 0 for i in range(a.layers)]
    if a.sliding_window is None:
        return [False] * a.layers
    pick = {"all": lambda i: True, "even": lambda i: i % 2 == 0, "odd": lambda i: i % 2 == 1}
    return [pick[a.sliding_layers](i) for i in range(a.layers)]


def make_tensors(a):
    H, D, V, I = a.hidden, a.head_dim, a.vocab, a.intermediate
    q_out, kv_out = a.heads * D, a.kv_heads * D
    # Gemma's RMSNorm multiplies by (1 + weight): a stored 0 is a norm weight of 1.0.
    norm_value = 0.0 if a.arch == "gemma2" else 1.0
    t = [("model.embed_tokens.weight", normal(a.seed, "model.embed_tokens.weight", (V, H), a.embed_std))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes = [
            ("self_attn.q_proj.weight", (q_out, H), a.qk_std),
            ("self_attn.k_proj.weight", (kv_out, H), a.qk_std),
            ("self_attn.v_proj.weight", (kv_out, H), a.std),
            ("self_attn.o_proj.weight", (H, q_out), a.std),
            ("mlp.gate_proj.weight", (I, H), a.std),
            ("mlp.up_proj.weight", (I, H), a.std),
            ("mlp.down_proj.weight", (H, I), a.std),
        ]
        t += [(p + n, normal(a.seed, p + n, s, std)) for n, s, std in shapes]
        norms = ["input_layernorm", "post_attention_layernorm"]
        if a.arch == "gemma2":
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        t += [(f"{p}{n}.weight", np.full((H,), norm_value, np.float32)) for n in norms]
    t.append(("model.norm.weight", np.full((H,), norm_value, np.float32)))
    if a.arch == "llama":
        t.append(("lm_head.weight", normal(a.seed, "lm_head.weight", (V, H), a.lm_head_std)))
    return t


def make_config(a):
    flags = sliding_flags(a)
    c = {
        "architectures": ["LlamaForCausalLM" if a.arch == "llama" else "Gemma2ForCausalLM"],
        "model_type": a.arch,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "vocab_size": a.vocab,
        "max_position_embeddings": a.max_pos,
        "rope_theta": a.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": a.rope_theta},
        "rms_norm_eps": a.rms_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": a.std,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "dtype": a.dtype,
        "torch_dtype": a.dtype,
        "use_cache": True,
    }
    if a.arch == "llama":
        c.update(
            {"hidden_act": "silu", "mlp_bias": False, "tie_word_embeddings": False, "pretraining_tp": 1}
        )
        if a.sliding_window is not None:
            c["sliding_window"] = a.sliding_window
            c["layer_types"] = ["sliding_attention" if s else "full_attention" for s in flags]
    else:
        c.update(
            {
                "hidden_activation": "gelu_pytorch_tanh",
                "hidden_act": "gelu_pytorch_tanh",
                "tie_word_embeddings": True,
                "query_pre_attn_scalar": a.head_dim,
                "attn_logit_softcapping": a.attn_softcap,
                "final_logit_softcapping": a.final_softcap,
                "sliding_window": a.sliding_window if a.sliding_window is not None else a.max_pos,
                "layer_types": ["sliding_attention" if s else "full_attention" for s in flags],
            }
        )
    return c


SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: pad, bos and eos of make_config


def write_tokenizer(a):
    """A word-level tokenizer over the vocabulary (checkpoint_io.write_word_level_tokenizer)."""
    write_word_level_tokenizer(a.out_dir, SPECIAL_TOKENS, a.vocab, "<unk>", {
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
        "eos_token": "</s>", "pad_token": "<unk>", "model_max_length": a.max_pos,
    })


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    tensors = make_tensors(a)
    kind = "bf16" if a.dtype == "bfloat16" else "f32"
    write_safetensors(os.path.join(a.out_dir, "model.safetensors"),
                      [(name, arr, kind) for name, arr in tensors])
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(make_config(a), f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    if a.tokenizer:
        write_tokenizer(a)
    n = sum(int(t.size) for _, t in tensors)
    print(f"make-llama-checkpoint: {a.arch}, {a.layers} layers, {n / 1e6:.1f}M parameters, {a.dtype} -> {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
