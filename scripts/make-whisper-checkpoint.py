#!/usr/bin/env python3
"""Writes a small Whisper checkpoint (WhisperForConditionalGeneration) with seeded random weights,
for end-to-end checks of an encoder-decoder model's cross-attention on CPU; nothing is downloaded.

The tokenizer is a byte-level BPE written here (256 byte symbols, a few merges), followed by
Whisper's special tokens in Whisper's order (<|endoftext|>, <|startoftranscript|>, languages,
<|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nocaptions|>, <|notimestamps|>)
and a few timestamp tokens; the feature extractor is Whisper's (80 mel bins, 30 s windows).
max_source_positions is 1500, as vLLM's Whisper processor pads every audio to 30 s (3000 frames,
halved by the encoder's stride-2 convolution). Weights come from transformers' own initialization
(torch.manual_seed), at a wider std than its default 0.02 (--init-std, default 0.5): at 0.02 the
logits are near uniform and greedy decoding emits one token for every audio, so a wrong kernel
would not show.

Usage: make-whisper-checkpoint.py OUT_DIR [--d-model 64] [--heads 2] [--layers 2]
         [--init-std 0.5] [--seed 0]
"""
import argparse
import json
import os

LANGS = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "it"]
SPECIALS = (["<|endoftext|>", "<|startoftranscript|>"] + [f"<|{lang}|>" for lang in LANGS]
            + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
               "<|nocaptions|>", "<|notimestamps|>"])
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
          ("Ġ", "s"), ("r", "e"), ("a", "t")]


def bytes_to_unicode():
    """GPT-2's (and Whisper's) map from bytes to printable characters."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--init-std", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer)

    os.makedirs(a.out, exist_ok=True)
    vocab = {s: i for i, s in enumerate(bytes_to_unicode().values())}
    for x, y in MERGES:
        vocab.setdefault(x + y, len(vocab))
    vocab_path, merges_path = os.path.join(a.out, "vocab.json"), os.path.join(a.out, "merges.txt")
    with open(vocab_path, "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(merges_path, "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{x} {y}\n" for x, y in MERGES))
    tok = WhisperTokenizer(vocab=vocab_path, merges=merges_path, unk_token="<|endoftext|>",
                           bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                           pad_token="<|endoftext|>", model_max_length=448)
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    tok.add_tokens(["<|%.2f|>" % (i * 0.02) for i in range(16)])
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    if list(ids.values()) != list(range(len(vocab), len(vocab) + len(SPECIALS))):
        raise SystemExit(f"special token ids out of Whisper's order: {ids}")
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80, sampling_rate=16000,
                                                  hop_length=160, chunk_length=30, n_fft=400),
        tokenizer=tok)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=a.d_model, encoder_layers=a.layers,
        decoder_layers=a.layers, encoder_attention_heads=a.heads, decoder_attention_heads=a.heads,
        encoder_ffn_dim=4 * a.d_model, decoder_ffn_dim=4 * a.d_model, max_source_positions=1500,
        max_target_positions=448, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
        decoder_start_token_id=sot, begin_suppress_tokens=None, suppress_tokens=None,
        tie_word_embeddings=True, scale_embedding=False, activation_function="gelu",
        init_std=a.init_std)
    torch.manual_seed(a.seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        max_length=448, no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=True,
        lang_to_id={f"<|{lang}|>": ids[f"<|{lang}|>"] for lang in LANGS},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]})
    model.save_pretrained(a.out, safe_serialization=True)
    processor.save_pretrained(a.out)
    print(f"wrote {a.out}: Whisper, d_model {a.d_model}, {a.heads} heads of "
          f"{a.d_model // a.heads}, {a.layers}+{a.layers} layers, vocabulary {len(tok)}, init std "
          f"{a.init_std}, seed {a.seed}")


if __name__ == "__main__":
    main()
