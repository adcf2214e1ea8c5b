#!/usr/bin/env python3
"""Build the tiny Qwen3-architecture model the real-engine test serves.

No hub download: the configuration is written here, the weights are random
from a fixed torch seed, and the tokenizer (tokenizer.json and
tokenizer_config.json, whose chat template the engine applies) is the Qwen3
one that `make testdata` fetches for the tokenizer tests. The vocabulary is the
tokenizer's own size, so every id the model can sample decodes.

Usage: build_model.py TOKENIZER_DIR OUT_DIR
Run with the venv's python (torch and transformers). OUT_DIR is rebuilt only
when its stamp differs from this script's contents.
"""

import hashlib
import json
import os
import shutil
import sys


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: build_model.py TOKENIZER_DIR OUT_DIR")
    tok_dir, out = sys.argv[1], sys.argv[2]
    with open(__file__, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(out, ".stamp")
    if os.path.exists(stamp) and open(stamp).read().strip() == want:
        print(f"model: {out} is current")
        return

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with open(os.path.join(tok_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = len(tok["model"]["vocab"]) + sum(
        1 for a in tok["added_tokens"] if a["id"] >= len(tok["model"]["vocab"])
    )
    im_end = next(a["id"] for a in tok["added_tokens"] if a["content"] == "<|im_end|>")
    eot = next(a["id"] for a in tok["added_tokens"] if a["content"] == "<|endoftext|>")

    # Two layers, hidden 128, head size 64: small enough to load in seconds on
    # a CPU, with a head size every vLLM CPU attention backend supports.
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=eot,
        eos_token_id=im_end,
        pad_token_id=eot,
        torch_dtype="float32",
    )
    torch.manual_seed(22)
    model = Qwen3ForCausalLM(cfg)
    model.eval()

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(tmp, name))
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eot, "eos_token_id": [im_end, eot], "pad_token_id": eot}, f)
    with open(os.path.join(tmp, ".stamp"), "w") as f:
        f.write(want + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"model: built {out} (vocab {vocab}, eos {im_end})")


if __name__ == "__main__":
    main()
