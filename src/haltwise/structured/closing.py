"""Closing a structure the model will not close: the tokens that complete it, chosen through the grammar.

When a loop detector cuts inside a JSON value (a string that repeats a phrase, an array that repeats an
item), the text so far is a valid prefix of the structure. The closer walks the grammar from there, one
token at a time, and at each step takes, among the tokens the grammar allows:

  1. the longest token that begins the *ideal close* of the text so far -- `"` if a string is open,
     then `]` / `}` for each open container, innermost first (ideal_close());
  2. else the allowed token of lowest static rank (closing_rank()): a neutral filler first
     (`,` `:` `0` `""` `[]` `{}` `null` `false` -- what a required key or a minimum asks for), then any
     other text, shortest first, then lowest id; whitespace last; end and special tokens never,

until the grammar accepts (then one end token stops the matcher). Every token is checked by the
matcher, so the result always parses and validates; the walk is bounded (MAX_CLOSING_TOKENS) and gives
up (None) rather than guess -- the request then ends as before, cut and reported "length".
The choice depends only on the text and the grammar state: the same prefix always closes the same way.
"""
from __future__ import annotations

import json

import torch

MAX_CLOSING_TOKENS = 64
_FILLERS = (",", ":", "0", '""', "[]", "{}", "null", "false")
_NEVER = 2 ** 62


def closing_rank(token_texts: list[bytes], width: int, never: frozenset[int]) -> torch.Tensor:
    """(width,) int64: each token id's rank as a closing step (module docstring); lower is taken first.
    never: ids never written by the closer (end and special tokens)."""
    rank = [_NEVER] * width
    for i, raw in enumerate(token_texts[:width]):
        if i in never or not raw:
            continue
        text = raw.decode("utf-8", errors="replace")
        if text in _FILLERS:
            rank[i] = 100 * (1 + _FILLERS.index(text)) + i % 100
        elif not text.strip():
            rank[i] = 10 ** 9 + i
        else:
            rank[i] = 10 ** 6 * (1 + min(len(text), 999)) + i
    return torch.tensor(rank, dtype=torch.int64)


def allowed_ids(row: torch.Tensor, width: int) -> torch.Tensor:
    """The token ids set in one bitmask row ((W,) int32; bit j of word w = token 32*w + j)."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = ((row.unsqueeze(1) >> shifts) & 1).reshape(-1)[:width]   # (W*32,) -> (width,)
    return torch.nonzero(bits, as_tuple=False).flatten()


def json_path(text: str) -> str:
    """Where in a JSON text that was cut mid-way the cut is, as a path: `$.items[2].name` ("$" at the root).

    The scan starts at the first `{` or `[` (a tool-call section's JSON body starts after its trigger)."""
    stack, _ = _scan(text)
    path = "$"
    for kind, key, _ in stack:
        if kind == "[":
            path += f"[{key}]"
        elif key is not None:
            path += f".{key}" if key.isidentifier() else f"[{json.dumps(key)}]"
    return path


def ideal_close(text: str) -> str:
    """The characters that would close a cut JSON text if nothing else were needed: `"` for an open
    string, then `]` / `}` per open container, innermost first."""
    stack, in_string = _scan(text)
    return ('"' if in_string else "") + "".join("]" if kind == "[" else "}" for kind, _, _ in reversed(stack))


def _scan(text: str) -> tuple[list[list], bool]:
    """(open containers [kind, key or index, expecting a key], inside an open string) at the text's end."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    stack: list[list] = []
    if not starts:
        return stack, False
    i, n = min(starts), len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            end, value = _string_end(text, i)
            if stack and stack[-1][0] == "{" and stack[-1][2]:
                stack[-1][1] = value
                stack[-1][2] = value is None     # still expecting a key while the key is unfinished
            if end is None:
                return stack, True
            i = end
            continue
        if ch in "{[":
            stack.append([ch, None if ch == "{" else 0, ch == "{"])
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == "," and stack:
            if stack[-1][0] == "[":
                stack[-1][1] += 1
            else:
                stack[-1][2], stack[-1][1] = True, None
        i += 1
    return stack, False


def _string_end(text: str, start: int) -> tuple[int | None, str | None]:
    """(index after the closing quote, the decoded string) or (None, None) when the string is unterminated."""
    i, escape = start + 1, False
    while i < len(text):
        ch = text[i]
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
        elif ch == '"':
            try:
                return i + 1, json.loads(text[start:i + 1])
            except ValueError:
                return i + 1, text[start + 1:i]
        i += 1
    return None, None
