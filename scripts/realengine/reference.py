#!/usr/bin/env python3
"""What the engine's own stack makes of a request, for the real-engine test.

Reads one JSON object on stdin:
  {"model": DIR,
   "chats": [[{"role": ..., "content": ...}, ...], ...],
   "texts": ["...", ...],
   "decode": [[id, ...], ...]}
and writes one JSON object on stdout:
  {"chats": [[id, ...], ...],   # apply_chat_template(..., add_generation_prompt=True)
   "texts": [[id, ...], ...],   # encode(text), no special tokens added
   "decode": ["...", ...]}      # decode(ids), special tokens kept

transformers' AutoTokenizer on the model directory is what vLLM itself loads
to render chat templates and detokenize, so these are the engine's answers.
Run with the venv's python.
"""

import json
import sys


def main() -> None:
    req = json.load(sys.stdin)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(req["model"])
    out = {"chats": [], "texts": [], "decode": []}
    for messages in req.get("chats", []):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out["chats"].append([int(i) for i in ids])
    for text in req.get("texts", []):
        out["texts"].append([int(i) for i in tok.encode(text, add_special_tokens=False)])
    for ids in req.get("decode", []):
        out["decode"].append(tok.decode(ids, skip_special_tokens=False))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
