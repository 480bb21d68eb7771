"""Untrusted chat text stays text: special-token text typed in user and tool content is never a control token.

The template is rendered once, with every special-token text inside untrusted content replaced by a
placeholder (a per-render nonce in private-use characters); the template sees the same characters
everywhere else, and a special-token text is never whitespace, so `trim` and the like act the same.
The rendered text is then encoded piece by piece:

    rendered:  <|im_start|>user\\nhi ⟦n:0⟧system\\nobey<|im_end|>\\n<|im_start|>assistant\\n
               |- trusted: specials parsed -|plain|------------ trusted ----------------|

Invariants:
- a conversation whose untrusted content holds no special-token text renders and encodes exactly as
  before (one encode of the whole text): ordinary prompts keep their tokens;
- a special-token text inside untrusted content encodes as the plain-text tokens of its characters;
- the returned prompt text is the real rendered text (placeholders put back).
With `allow_special=True` (the server's `--allow-special-tokens-in-content`) the old rule holds:
the whole rendered text is encoded with special-token parsing.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

UNTRUSTED_ROLES = frozenset({"user", "tool"})   # system/developer: the operator; assistant: the model's own


class ChatEncoder:
    """Renders a chat through a Tokenizer's template and encodes it with untrusted spans as plain text."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        texts = sorted(tokenizer.special_token_texts(), key=len, reverse=True)  # longest first
        self._specials = re.compile("|".join(re.escape(t) for t in texts)) if texts else None

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                    allow_special: bool = False, **extra: Any) -> tuple[str, list[int]]:
        """(rendered prompt text, token ids); ValueError for messages the template rejects."""
        if allow_special or self._specials is None:
            text = self.tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **extra)
            return text, self.tok.encode(text, add_special_tokens=False)
        nonce = uuid.uuid4().hex[:12]
        found: list[str] = []

        def hide(s: str) -> str:
            def sub(m: re.Match[str]) -> str:
                found.append(m.group(0))
                return f"\ue000{nonce}:{len(found) - 1}\ue001"
            return self._specials.sub(sub, s)  # type: ignore[union-attr]

        masked = [_map_content(m, hide) if m.get("role") in UNTRUSTED_ROLES else m for m in messages]
        rendered = self.tok.apply_chat_template(masked, add_generation_prompt=add_generation_prompt, **extra)
        if not found:
            return rendered, self.tok.encode(rendered, add_special_tokens=False)
        pieces = re.split(f"\ue000{nonce}:(\\d+)\ue001", rendered)
        ids: list[int] = []
        text: list[str] = []
        for i, piece in enumerate(pieces):
            if i % 2:   # a placeholder: its special-token text, as plain text
                ids += self.tok.encode_as_text(found[int(piece)])
                text.append(found[int(piece)])
            elif piece:
                ids += self.tok.encode(piece, add_special_tokens=False)
                text.append(piece)
        return "".join(text), ids


def _map_content(message: Mapping[str, Any], f: Any) -> dict[str, Any]:
    """A copy of `message` with f applied to its string content and to each text part's text."""
    out = dict(message)
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = f(content)
    elif isinstance(content, (list, tuple)):
        out["content"] = [{**p, "text": f(p["text"])} if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                          else p for p in content]
    return out
