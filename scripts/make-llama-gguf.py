#!/usr/bin/env python3
"""Writes a small Llama-architecture GGUF file with seeded random weights that llama.cpp loads and
runs (llama-completion, llama-bench, llama-simple ...), for end-to-end tests of attention backends.

The file holds the model and a SentencePiece-style ("llama") vocabulary, so llama.cpp tokenizes
text prompts and detokenizes its output: "<unk>", "<s>", "</s>" (ids 0, 1, 2: unk, bos, eos),
the 256 byte tokens "<0x00>".."<0xFF>" (what SentencePiece falls back to for text no piece
covers), then word pieces up to --vocab: "\u2581" (the SentencePiece space), "\u2581a".."\u2581z",
the letters, digits and punctuation, then letter pairs ("th", "er", ...), "\u2581" + pair, and
"t<N>" fillers. Earlier pieces score higher, so the tokenizer merges letters into pairs.

Weights are drawn as make-llama-checkpoint.py draws them (checkpoint_io.normal: std 0.02 by
default, each tensor from its own generator seeded from --seed and the tensor's Hugging Face name;
norm weights 1.0), and the query and key rows are permuted as llama.cpp's convert_hf_to_gguf.py
permutes them for its interleaved RoPE. So the file holds the same model as
`make-llama-checkpoint.py --arch llama` with the same seed, sizes, --std, --qk-std and
--lm-head-std (there: --head-dim, --intermediate, --max-pos for --head-size, --ffn, --ctx), up to
the rounding of --dtype; a tensor's values do not depend on the other options.

With std 0.02 throughout, attention is close to uniform (over a 191-token prompt the largest
attention weight of a row averages 0.02) and greedy generation repeats one or two tokens.
--qk-std (query and key projections) and --lm-head-std (output layer) make them sharp: with
--qk-std 0.08 --lm-head-std 0.2 the largest weight averages 0.7, greedy tokens vary, and
uniform attention, a dropped diagonal or a wrong query-to-KV-head mapping changes 85-100% of the
prompt positions' argmax tokens. Such a model also magnifies rounding: f16 rounding of Q, K and
V moves its logits (std 6.4) by about 0.1, so two correct implementations that round
differently can part at a near-tie within a few dozen greedy tokens (--qk-std 0.05: largest
weight 0.35, logits moved by about 0.04).

The GGUF keys written are the ones llama.cpp's LLM_ARCH_LLAMA reads (llama.context_length,
embedding_length, block_count, feed_forward_length, attention.head_count, head_count_kv,
key_length, value_length, layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base,
vocab_size); --hidden need not equal --heads * --head-size. Tensors are stored as GGUF stores
them: a numpy matrix of shape (out, in) has ggml dimensions ne = [in, out].

Usage: make-llama-gguf.py OUT.gguf [--seed N] [--layers 4] [--dtype f32|f16] [--gguf-py DIR] ...
  e.g. make-llama-gguf.py /tmp/tiny.gguf --qk-std 0.08 --lm-head-std 0.2 --dtype f16
       llama-completion -m /tmp/tiny.gguf -p "hello world" -n 32 --temp 0 -no-cnv -fa on
Needs numpy and llama.cpp's gguf Python package (pip install gguf, or --gguf-py pointing at the
gguf-py folder of a llama.cpp source tree; the package itself imports pyyaml).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_io import normal  # noqa: E402

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: unk, bos, eos
SPACE = "\u2581"  # SentencePiece's word-boundary mark; llama.cpp writes it back as a space
LETTERS = "etaoinshrdlcumwfgypbvkjxqz"  # by frequency in English text: likelier pairs first
MIN_VOCAB = len(SPECIAL_TOKENS) + 256 + 1


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", help="the GGUF file to write")
    p.add_argument("--gguf-py", default=None, help="folder holding the gguf package (llama.cpp's gguf-py)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-size", type=int, default=128)
    p.add_argument("--ffn", type=int, default=2816, help="feed-forward (intermediate) size")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--ctx", type=int, default=32768, help="llama.context_length (training context)")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-eps", type=float, default=1e-5)
    p.add_argument("--dtype", choices=["f32", "f16"], default="f32", help="weight matrices (norms are f32)")
    p.add_argument("--std", type=float, default=0.02, help="std of linear/embedding weights")
    p.add_argument("--qk-std", type=float, default=None, help="std of the query/key projections")
    p.add_argument("--lm-head-std", type=float, default=None, help="std of the output layer")
    a = p.parse_args(argv)
    for name in ("layers", "hidden", "heads", "kv_heads", "head_size", "ffn", "vocab", "ctx"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.heads % a.kv_heads:
        p.error(f"--heads ({a.heads}) must be a multiple of --kv-heads ({a.kv_heads})")
    if a.head_size % 2:
        p.error(f"--head-size must be even (RoPE rotates pairs), got {a.head_size}")
    if a.vocab < MIN_VOCAB:
        p.error(f"--vocab must be at least {MIN_VOCAB} (3 special tokens, 256 byte tokens and "
                f"'{SPACE}'), got {a.vocab}")
    for name in ("std", "qk_std", "lm_head_std", "rms_eps", "rope_theta"):
        value = getattr(a, name)
        if value is not None and not value > 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    a.qk_std = a.std if a.qk_std is None else a.qk_std
    a.lm_head_std = a.std if a.lm_head_std is None else a.lm_head_std
    return a


def import_gguf(folder):
    if folder is not None:
        if not os.path.isfile(os.path.join(folder, "gguf", "__init__.py")):
            sys.exit(f"make-llama-gguf: --gguf-py {folder!r} has no gguf/__init__.py "
                     "(expected llama.cpp's gguf-py folder)")
        sys.path.insert(0, os.path.abspath(folder))
    try:
        import gguf
    except ImportError as e:
        sys.exit(f"make-llama-gguf: cannot import the gguf package ({e}); pip install gguf, or "
                 "pass --gguf-py LLAMA_CPP/gguf-py")
    return gguf


def permute_rope_rows(w, n_head):
    """Hugging Face Llama rotates the two halves of each head (x[i], x[i + d/2]); llama.cpp's
    LLM_ARCH_LLAMA rotates adjacent pairs (x[2i], x[2i + 1]). Reordering each head's output rows
    as convert_hf_to_gguf.py does (LlamaModel.permute) gives the same attention."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def make_tensors(a):
    """(GGUF name, float32 array with numpy shape (out, in) or (n,), is_norm) in file order."""
    H, V, I = a.hidden, a.vocab, a.ffn
    q_out, kv_out = a.heads * a.head_size, a.kv_heads * a.head_size
    t = [("token_embd.weight", normal(a.seed, "model.embed_tokens.weight", (V, H), a.std), False)]
    for i in range(a.layers):
        hf, blk = f"model.layers.{i}.", f"blk.{i}."
        shapes = [
            ("attn_q", "self_attn.q_proj", (q_out, H), a.qk_std, a.heads),
            ("attn_k", "self_attn.k_proj", (kv_out, H), a.qk_std, a.kv_heads),
            ("attn_v", "self_attn.v_proj", (kv_out, H), a.std, None),
            ("attn_output", "self_attn.o_proj", (H, q_out), a.std, None),
            ("ffn_gate", "mlp.gate_proj", (I, H), a.std, None),
            ("ffn_up", "mlp.up_proj", (I, H), a.std, None),
            ("ffn_down", "mlp.down_proj", (H, I), a.std, None),
        ]
        t.append((blk + "attn_norm.weight", np.ones((H,), np.float32), True))
        for name, hf_name, shape, std, rope_heads in shapes:
            w = normal(a.seed, hf + hf_name + ".weight", shape, std)
            if rope_heads is not None:
                w = permute_rope_rows(w, rope_heads)
            t.append((blk + name + ".weight", w, False))
            if name == "attn_output":
                t.append((blk + "ffn_norm.weight", np.ones((H,), np.float32), True))
    t.append(("output_norm.weight", np.ones((H,), np.float32), True))
    t.append(("output.weight", normal(a.seed, "lm_head.weight", (V, H), a.lm_head_std), False))
    return t


def word_pieces():
    """The pieces after the byte tokens, best (highest score) first; unique, never ending."""
    yield SPACE
    yield from (SPACE + c for c in LETTERS)
    yield from LETTERS
    yield from "0123456789.,!?'-:;\"()"
    pairs = sorted(((i + j, x + y) for i, x in enumerate(LETTERS) for j, y in enumerate(LETTERS)))
    yield from (pair for _, pair in pairs)
    yield from (SPACE + pair for _, pair in pairs)
    n = 0
    while True:
        yield f"t{n}"
        n += 1


def make_vocab(gguf, n_vocab):
    T = gguf.TokenType
    tokens = list(SPECIAL_TOKENS)
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [T.BYTE] * 256
    scores = [0.0] * len(tokens)
    pieces = word_pieces()
    while len(tokens) < n_vocab:
        tokens.append(next(pieces))
        types.append(T.NORMAL)
        scores.append(-float(len(tokens) - MIN_VOCAB))
    assert len(set(tokens)) == len(tokens) == n_vocab
    return tokens, scores, [int(t) for t in types]


def write_gguf(gguf, a, tensors):
    w = gguf.GGUFWriter(a.out + ".tmp", "llama")
    w.add_name(f"attnrt test llama {a.layers}x{a.hidden} seed {a.seed}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(a.head_size)
    w.add_value_length(a.head_size)
    w.add_rope_dimension_count(a.head_size)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.rms_eps)
    w.add_vocab_size(a.vocab)

    tokens, scores, types = make_vocab(gguf, a.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)

    matrix_dtype = np.float16 if a.dtype == "f16" else np.float32
    for name, arr, is_norm in tensors:
        w.add_tensor(name, np.ascontiguousarray(arr.astype(np.float32 if is_norm else matrix_dtype)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(a.out + ".tmp", a.out)


def main(argv):
    a = parse_args(argv)
    gguf = import_gguf(a.gguf_py)
    tensors = make_tensors(a)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_gguf(gguf, a, tensors)
    n = sum(int(t.size) for _, t, _ in tensors)
    print(f"make-llama-gguf: llama, {a.layers} layers, {n / 1e6:.1f}M parameters, {a.dtype}, "
          f"vocab {a.vocab} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
