#!/usr/bin/env python3
"""Writes a small Bloom checkpoint (BloomForCausalLM: ALiBi attention, no rotary embedding) with
seeded random weights, for end-to-end checks of ALiBi on CPU; nothing is downloaded, no tokenizer
(load it with skip_tokenizer_init=True and token-id prompts, as scripts/vllm_reference_run.py does).

Weights come from transformers' own initialization (torch.manual_seed(--seed)) at
initializer_range --std (default 0.05: sharper than Bloom's 0.02, so the outputs depend on which
keys each query sees). Bloom's ALiBi slopes (2^(-8 (h + 1) / N) for N heads a power of two) make
every head's attention decay with distance at its own rate, so a wrong bias shows.

Usage: make-bloom-checkpoint.py OUT_DIR [--layers 4] [--hidden 512] [--heads 8] [--vocab 4096]
         [--std 0.05] [--seed 0] [--dtype float32|bfloat16]
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--std", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = p.parse_args()

    import torch
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=a.vocab, hidden_size=a.hidden, n_layer=a.layers,
                         n_head=a.heads, initializer_range=a.std, bos_token_id=1, eos_token_id=2,
                         pad_token_id=3, tie_word_embeddings=True)
    torch.manual_seed(a.seed)
    model = BloomForCausalLM(config).eval().to(getattr(torch, a.dtype))
    model.save_pretrained(a.out, safe_serialization=True)
    print(f"wrote {a.out}: Bloom, hidden {a.hidden}, {a.heads} heads of {a.hidden // a.heads}, "
          f"{a.layers} layers, vocabulary {a.vocab}, std {a.std}, seed {a.seed}")


if __name__ == "__main__":
    main()
