#!/usr/bin/env python3
"""Writes a small BERT checkpoint with seeded random weights that vLLM loads as an embedding model.

OUT_DIR gets what a sentence-transformers BERT model has, minus the tokenizer:
  config.json                  architectures ["BertModel"] (vLLM 0.32 maps it to
                               bert.BertEmbeddingModel: EncoderOnlyAttention, i.e. non-causal
                               attention of attn_type ENCODER_ONLY, and LLM.embed)
  model.safetensors            HF BertModel tensor names (embeddings.*, encoder.layer.N.*, pooler.*;
                               vLLM drops pooler.*)
  modules.json, 1_Pooling/config.json, 2_Normalize  sentence-transformers' pooling: --pooling mean
                               (default: every query row of the last layer counts) or cls (BERT's
                               own default, vLLM's too without modules.json), then L2 normalization
  sentence_bert_config.json    max_seq_length (vLLM takes max_model_len from it)
  tokenizer.json, tokenizer_config.json  a word-level tokenizer (tokens "[PAD]" "[UNK]" "[CLS]"
                               "[SEP]" "[MASK]" at ids 0..4, then "t5", "t6", ... up to the
                               vocabulary size; split on whitespace), which transformers loads
                               offline: vLLM 0.32's pooling runner needs a tokenizer even for
                               token-id prompts (its scoring IO processor asks for one at start-up;
                               skip_tokenizer_init=True fails there)

Weights: normal(0, --std) (BERT's initializer_range, 0.02), biases 0, LayerNorm weight 1 and
bias 0, as BertModel initializes them; each tensor has its own generator, seeded from --seed and
the tensor's name (scripts/checkpoint_io.py). The query and key projections get --qk-std instead:
with LayerNorm'd inputs of unit variance, attention logits have a spread of about
hidden * qk_std^2 (0.2 at std 0.02: attention nearly uniform, so a wrong mask hardly shows; 3.3
at 0.08, 5.1 at 0.1). The script prints layer 0's attention statistics on a random sequence of
--probe-len tokens (float64, numpy): the mean largest probability of a query row and the mean
entropy relative to uniform attention (1.0 = uniform).

Usage: make-bert-checkpoint.py OUT_DIR [--seed N] [--qk-std 0.1] [--layers 4] [--heads 8]
         [--head-dim 64] [--intermediate 1024] [--vocab 1000] [--max-pos 2048] [--pooling mean|cls]
         [--dtype float32|bfloat16]
Head size 128: --heads 4 --head-dim 128 (hidden 512) or --heads 8 --head-dim 128 (hidden 1024).
Needs only numpy.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

from checkpoint_io import normal, write_safetensors, write_word_level_tokenizer


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64, help="hidden size = heads * head dim")
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--max-pos", type=int, default=2048, help="max_position_embeddings")
    p.add_argument("--type-vocab", type=int, default=2, help="type_vocab_size")
    p.add_argument("--ln-eps", type=float, default=1e-12, help="layer_norm_eps")
    p.add_argument("--act", default="gelu", help="hidden_act")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="stored tensor type (and config torch_dtype)")
    p.add_argument("--std", type=float, default=0.02, help="std of linear/embedding weights")
    p.add_argument("--qk-std", type=float, default=0.1, help="std of the query/key projections")
    p.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    p.add_argument("--probe-len", type=int, default=512,
                   help="sequence length of the attention statistics printed (0: none)")
    a = p.parse_args(argv)
    for name in ("layers", "heads", "head_dim", "intermediate", "vocab", "max_pos", "type_vocab"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.vocab < len(SPECIAL_TOKENS) + 1:
        p.error(f"--vocab must be at least {len(SPECIAL_TOKENS) + 1} (ids 0..4 are special), "
                f"got {a.vocab}")
    a.hidden = a.heads * a.head_dim
    return a


def make_tensors(a):
    H, I = a.hidden, a.intermediate
    t = []

    def w(name, shape, std):
        t.append((name, normal(a.seed, name, shape, std)))

    def const(name, shape, value):
        t.append((name, np.full(shape, value, np.float32)))

    def layer_norm(prefix):
        const(prefix + ".weight", (H,), 1.0)
        const(prefix + ".bias", (H,), 0.0)

    w("embeddings.word_embeddings.weight", (a.vocab, H), a.std)
    w("embeddings.position_embeddings.weight", (a.max_pos, H), a.std)
    w("embeddings.token_type_embeddings.weight", (a.type_vocab, H), a.std)
    layer_norm("embeddings.LayerNorm")
    for i in range(a.layers):
        p = f"encoder.layer.{i}."
        for name, std in (("query", a.qk_std), ("key", a.qk_std), ("value", a.std)):
            w(f"{p}attention.self.{name}.weight", (H, H), std)
            const(f"{p}attention.self.{name}.bias", (H,), 0.0)
        w(f"{p}attention.output.dense.weight", (H, H), a.std)
        const(f"{p}attention.output.dense.bias", (H,), 0.0)
        layer_norm(f"{p}attention.output.LayerNorm")
        w(f"{p}intermediate.dense.weight", (I, H), a.std)
        const(f"{p}intermediate.dense.bias", (I,), 0.0)
        w(f"{p}output.dense.weight", (H, I), a.std)
        const(f"{p}output.dense.bias", (H,), 0.0)
        layer_norm(f"{p}output.LayerNorm")
    w("pooler.dense.weight", (H, H), a.std)
    const("pooler.dense.bias", (H,), 0.0)
    return t


def make_config(a):
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "intermediate_size": a.intermediate,
        "hidden_act": a.act,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": a.max_pos,
        "type_vocab_size": a.type_vocab,
        "vocab_size": a.vocab,
        "initializer_range": a.std,
        "layer_norm_eps": a.ln_eps,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        "use_cache": False,
        "dtype": a.dtype,
        "torch_dtype": a.dtype,
    }


def write_json(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(content, f, indent=2)
        f.write("\n")


def write_sentence_transformers(a):
    """modules.json and the pooling module's config as sentence-transformers writes them; vLLM's
    get_pooling_config reads the pooling mode and whether a Normalize module follows."""
    write_json(os.path.join(a.out_dir, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ])
    write_json(os.path.join(a.out_dir, "1_Pooling", "config.json"), {
        "word_embedding_dimension": a.hidden,
        "pooling_mode_cls_token": a.pooling == "cls",
        "pooling_mode_mean_tokens": a.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    })
    os.makedirs(os.path.join(a.out_dir, "2_Normalize"), exist_ok=True)
    write_json(os.path.join(a.out_dir, "sentence_bert_config.json"),
               {"max_seq_length": a.max_pos, "do_lower_case": False})


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_tokenizer(a):
    """A word-level tokenizer over the vocabulary (checkpoint_io.write_word_level_tokenizer)."""
    write_word_level_tokenizer(a.out_dir, SPECIAL_TOKENS, a.vocab, "[UNK]", {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]",
        "model_max_length": a.max_pos,
    })


def layer_norm(x, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def attention_stats(a, tensors):
    """Layer 0's attention probabilities (non-causal) on a random sequence: the mean largest
    probability per query row and the mean entropy over log(n), averaged over heads."""
    t = dict(tensors)
    n = min(a.probe_len, a.max_pos)
    rng = np.random.default_rng([a.seed, 12345])
    ids = rng.integers(len(SPECIAL_TOKENS), a.vocab, size=n)
    x = (t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n]
         + t["embeddings.token_type_embeddings.weight"][0]).astype(np.float64)
    x = layer_norm(x, a.ln_eps)
    q = x @ t["encoder.layer.0.attention.self.query.weight"].T.astype(np.float64)
    k = x @ t["encoder.layer.0.attention.self.key.weight"].T.astype(np.float64)
    q = q.reshape(n, a.heads, a.head_dim).transpose(1, 0, 2)
    k = k.reshape(n, a.heads, a.head_dim).transpose(1, 0, 2)
    s = q @ k.transpose(0, 2, 1) / math.sqrt(a.head_dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(np.maximum(p, 1e-300))).sum(-1)
    return n, float(s.std()), float(p.max(-1).mean()), float(entropy.mean() / math.log(n))


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    tensors = make_tensors(a)
    kind = "bf16" if a.dtype == "bfloat16" else "f32"
    write_safetensors(os.path.join(a.out_dir, "model.safetensors"),
                      [(name, arr, kind) for name, arr in tensors])
    write_json(os.path.join(a.out_dir, "config.json"), make_config(a))
    write_sentence_transformers(a)
    write_tokenizer(a)
    n = sum(int(x.size) for _, x in tensors)
    print(f"make-bert-checkpoint: BertModel, {a.layers} layers, hidden {a.hidden}, {a.heads} heads "
          f"of {a.head_dim}, {n / 1e6:.1f}M parameters, {a.dtype}, {a.pooling} pooling, "
          f"q/k std {a.qk_std} -> {a.out_dir}")
    if a.probe_len > 0:
        length, spread, top, ent = attention_stats(a, tensors)
        print(f"make-bert-checkpoint: layer 0 attention on {length} random tokens: logit std "
              f"{spread:.2f}, mean largest probability {top:.3f} (uniform {1 / length:.4f}), mean "
              f"entropy {ent:.3f} of uniform's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
