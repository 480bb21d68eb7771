"""Regenerate tests/models/fixtures/<model>.json: transformers' float32 greedy tokens on the real GGUFs.

    PYTHONPATH=src:. python tests/models/make_oracle_fixtures.py [gemma3-270m] [qwen2.5-coder-0.5b]

Prompt ids come from transformers' tokenizer of the same GGUF (Gemma: with its <bos>; Qwen: plain text
and chat-templated turns), so the model tests do not depend on haltwise's tokenizer.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import transformers

from tests.models.real_models import real_model_path, transformers_gguf_model, transformers_greedy

NEW_TOKENS = 32
FIXTURES = Path(__file__).parent / "fixtures"
PLAIN = {
    "gemma3-270m": ["The capital of France is", "def fibonacci(n):\n    ",
                    "Once upon a time, in a small village by the sea,",
                    "The three primary colours are", "1, 1, 2, 3, 5, 8,"],
    "qwen2.5-coder-0.5b": ["def quicksort(arr):\n", "# Read a CSV file with pandas\nimport pandas as pd\n",
                           "The capital of France is"],
}
# Longer than Gemma's 512-token sliding window, so its windowed layers are checked on the real model.
LONG = "A ship's log. " + " ".join(
    f"Day {d}: wind from the {['north', 'east', 'south', 'west'][d % 4]}, {d * 7 % 23} knots; "
    f"we sighted {d % 5 + 1} {['gulls', 'whales', 'ships', 'islands', 'storms'][d % 5]} and logged "
    f"{d * 13 % 31} miles." for d in range(1, 40)) + " Day 40:"
LONG_PROMPTS = {"gemma3-270m": [LONG], "qwen2.5-coder-0.5b": []}
CHATS = {
    "gemma3-270m": [],
    "qwen2.5-coder-0.5b": [
        [{"role": "user", "content": "Write a Python function that reverses a string."}],
        [{"role": "system", "content": "You are a terse assistant."},
         {"role": "user", "content": "What does `git rebase` do? One sentence."}],
    ],
}


def cases(name: str, path: Path) -> list[dict]:
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    out = [{"text": t, "prompt_ids": tok(t)["input_ids"]} for t in PLAIN[name] + LONG_PROMPTS[name]]
    for chat in CHATS[name]:
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out.append({"text": text, "prompt_ids": tok(text, add_special_tokens=False)["input_ids"]})
    return out


def main(names: list[str]) -> None:
    FIXTURES.mkdir(exist_ok=True)
    for name in names:
        path = real_model_path(name)
        start = time.perf_counter()
        prompts = cases(name, path)
        model = transformers_gguf_model(path)
        for case in prompts:
            case["tokens"] = transformers_greedy(model, case["prompt_ids"], NEW_TOKENS)
        record = {"model": name, "file": path.name, "file_size": path.stat().st_size,
                  "transformers": transformers.__version__, "dtype": "float32", "new_tokens": NEW_TOKENS,
                  "cases": prompts}
        (FIXTURES / f"{name}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(prompts)} prompts in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:] or list(PLAIN))
