"""Passkey retrieval: a random number hidden at a depth of a long text, asked for at the end.

The prompt is one user message rendered through the model's chat template:

    <template prefix> PREFACE  haystack[:cut] NEEDLE haystack[cut:]  QUESTION <template suffix>
                               |<------ depth x haystack ------>|

`cut` is the line break nearest to depth x len(haystack), so the needle is a line of its own.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

PREFACE = ("There is a pass key hidden inside a lot of irrelevant text. Find it and remember it; "
           "you will be asked for it at the end.\n\n")
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "\n\nWhat is the pass key?"


@dataclass(frozen=True)
class PasskeyPrompt:
    key: str                 # the 5-digit number
    depth: float             # where the needle sits, as a share of the haystack (0..1)
    prompt_ids: list[int]    # exactly what the model is given
    needle_token: int        # approximate token index of the needle in prompt_ids


def new_key(rng: random.Random) -> str:
    """A 5-digit pass key (10000..99999)."""
    return str(rng.randint(10000, 99999))


def build_prompt(tokenizer, text_ids: list[int], key: str, depth: float, max_prompt_tokens: int) -> PasskeyPrompt:
    """The longest passkey prompt of at most max_prompt_tokens tokens built from the start of text_ids."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    needle = NEEDLE.format(key=key)

    def render(haystack: str) -> tuple[list[int], int]:
        cut = _line_break_near(haystack, depth)
        content = PREFACE + haystack[:cut] + "\n" + needle + "\n" + haystack[cut:] + QUESTION
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        head = rendered[:rendered.index(needle)]
        head_len = len(tokenizer.encode(head, add_special_tokens=False))
        return tokenizer.encode(rendered, add_special_tokens=False), head_len

    overhead = len(render("")[0])
    budget = max_prompt_tokens - overhead
    if budget < 1:
        raise ValueError(f"max_prompt_tokens {max_prompt_tokens} leaves no room for text (overhead {overhead})")
    budget = min(budget, len(text_ids))
    while True:  # re-tokenising the decoded haystack in context can add a few tokens; shrink until it fits
        ids, needle_at = render(tokenizer.decode(text_ids[:budget]))
        if len(ids) <= max_prompt_tokens:
            return PasskeyPrompt(key, depth, ids, needle_at)
        budget -= len(ids) - max_prompt_tokens


def found(key: str, answer: str) -> bool:
    """Success: the number appears in the answer."""
    return key in answer


def _line_break_near(text: str, depth: float) -> int:
    """Index just after the line break closest to depth x len(text) (the exact point if there is none)."""
    target = int(depth * len(text))
    before, after = text.rfind("\n", 0, target), text.find("\n", target)
    candidates = [i + 1 for i in (before, after) if i >= 0]
    return min(candidates, key=lambda i: abs(i - target)) if candidates else target
