"""What the checkpoint scripts (make-llama-checkpoint.py, make-deepseek-v4-checkpoint.py,
make-bert-checkpoint.py) share: seeded weights, bfloat16 rounding, a safetensors writer and a
word-level tokenizer. Needs only numpy."""

import json
import os
import struct
import zlib

import numpy as np

# Tensor kinds of write_safetensors: safetensors dtype and bytes per element.
SAFETENSORS_DTYPES = {"bf16": ("BF16", 2), "f32": ("F32", 4), "i32": ("I32", 4), "f8": ("F8_E4M3", 1)}


def normal(seed, name, shape, std):
    """float32 N(0, std^2) values, seeded by (seed, the tensor's name): a tensor's values do not
    depend on which other tensors a checkpoint has."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)


def to_bfloat16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def encode(arr, kind):
    if kind == "bf16":
        return to_bfloat16_bits(arr).tobytes()
    if kind == "f32":
        return np.ascontiguousarray(arr, "<f4").tobytes()
    if kind == "i32":
        return np.ascontiguousarray(arr, "<i4").tobytes()
    if kind == "f8":  # already bit patterns
        return np.ascontiguousarray(arr, np.uint8).tobytes()
    raise ValueError(f"unknown tensor kind {kind!r}")


def write_safetensors(path, tensors):
    """tensors: list of (name, array, kind) with kind in SAFETENSORS_DTYPES. The safetensors
    format: an 8-byte little-endian header length, a JSON header (dtype, shape, data_offsets per
    tensor), then the raw data. Written to a temporary file, then renamed."""
    header, blobs, offset = {}, [], 0
    for name, arr, kind in tensors:
        raw = encode(arr, kind)
        dtype, size = SAFETENSORS_DTYPES[kind]
        assert len(raw) == arr.size * size, name
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def write_word_level_tokenizer(out_dir, special_tokens, vocab_size, unk_token, config):
    """tokenizer.json (the tokenizers library's format: a WordLevel model over whitespace-split
    words, special_tokens as ids 0.., then words t<id> up to vocab_size) and tokenizer_config.json
    (`config`, for transformers' PreTrainedTokenizerFast)."""
    vocab = {t: i for i, t in enumerate(special_tokens)}
    vocab.update({f"t{i}": i for i in range(len(special_tokens), vocab_size)})
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(special_tokens)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": unk_token},
    }
    for name, content, indent in (("tokenizer.json", tokenizer, None),
                                  ("tokenizer_config.json", config, 2)):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(content, f, indent=indent)
            f.write("\n")
