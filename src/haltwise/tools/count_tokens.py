"""`haltwise count-tokens [FILE]`: characters, tokens with and without special tokens, and the fit.

Counts exactly what the engine would see: with --chat the text is wrapped as one user message and
rendered through the model's chat template (special tokens included), as /v1/chat/completions does.
"""
from __future__ import annotations

import argparse
import json
import sys

from haltwise.tools.model_args import chat_template_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="text file (default: stdin)")
    p.add_argument("--chat", action="store_true", help="wrap the text as one user message in the chat template")
    p.add_argument("--max-tokens", type=int, default=0, help="completion tokens to reserve when checking the fit")
    p.add_argument("--model", default=None, help="GGUF file, Hugging Face directory or named model (default: SmolLM2)")
    p.add_argument("--chat-template", type=chat_template_file, default=None, metavar="FILE",
                   help="with --chat: this Jinja template instead of the model's")
    p.add_argument("--max-model-len", type=int, default=None, help="window to check against (default: the model's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)


def count(text: str, tokenizer, window: int, chat: bool = False, max_tokens: int = 0) -> dict:
    """The numbers count-tokens prints; `prompt_tokens` equals the engine's usage.prompt_tokens."""
    if chat:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        prompt_ids = tokenizer.encode(rendered, add_special_tokens=False)
    else:
        prompt_ids = tokenizer.encode(text)
    plain = tokenizer.encode(text, add_special_tokens=False)
    special = set(tokenizer.special_token_ids)
    need = len(prompt_ids) + max_tokens
    return {
        "characters": len(text),
        "prompt_tokens": len(prompt_ids),                       # what the engine sees
        "special_tokens": sum(1 for t in prompt_ids if t in special),
        "text_tokens": len(plain),                              # the text alone, no template or specials
        "window": window,
        "max_tokens": max_tokens,
        "fits": need <= window and len(prompt_ids) < window,
        "room_left": window - need,
    }


def run(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
    if args.tiny:
        from haltwise.tokenizer.tiny import tiny_tokenizer

        tokenizer, window = tiny_tokenizer(), args.max_model_len or 512
    else:
        from haltwise.tools.model_args import load_tokenizer, read_model_config

        path, config = read_model_config(args.model)
        tokenizer, window = load_tokenizer(path), args.max_model_len or config.max_position_embeddings
    if args.chat_template is not None:
        tokenizer.set_chat_template(args.chat_template)
    try:
        result = count(text, tokenizer, window, args.chat, args.max_tokens)
    except ValueError as e:  # --chat with a model that has no chat template
        print(f"haltwise count-tokens: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>15}: {value}")
    return 0 if result["fits"] else 1
