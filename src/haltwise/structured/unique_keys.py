"""Unique keys: under a JSON grammar, an object never gets a key it already has.

RFC 8259 says an object's names SHOULD be unique, and parsers keep only one of the values. For a model a
repeated key is the usual start of a loop (`"population": 1, "population": 1, ...`), and the llguidance
grammar (context-free) cannot forbid it. This guard follows the JSON text of the answer, byte by byte, and
removes from a step's bitmask the tokens that would finish a key the innermost open object already holds:

    inside a key string, written so far P:   a token whose bytes up to its first `"` complete P to a held key
    between members (after `{`, `,` or a value): a token holding a whole held key, `"K"`, after only
    whitespace and commas

Keys are compared as the raw bytes between their quotes (an escaped spelling of the same key is a different
spelling: not caught). Tokens with a backslash before their first quote are never removed. If the removal
would leave no legal token, the row is left as the grammar made it (the grammar always has the last word).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

_WS_OR_COMMA = frozenset(b" \t\r\n,")


@dataclass(slots=True)
class _Frame:
    is_object: bool
    keys: set[bytes] = field(default_factory=set)
    expecting_key: bool = True


class KeyIndex:
    """Per tokenizer: which tokens close a key with given bytes, and which hold a whole key."""

    def __init__(self, token_bytes: list[bytes]):
        self.closing: dict[bytes, list[int]] = {}   # bytes before the first '"' -> token ids
        self.whole: dict[bytes, list[int]] = {}     # K of a token [ws/commas] '"' K '"' ... -> token ids
        for i, raw in enumerate(token_bytes):
            q = raw.find(b'"')
            if q < 0:
                continue
            head = raw[:q]
            if b"\\" not in head:
                self.closing.setdefault(head, []).append(i)
            q2 = raw.find(b'"', q + 1)
            if q2 > q and all(c in _WS_OR_COMMA for c in head) and b"\\" not in raw[q + 1:q2]:
                self.whole.setdefault(raw[q + 1:q2], []).append(i)


class UniqueKeys:
    """The guard of one answer: fed every consumed token, asked to trim each step's bitmask row."""

    def __init__(self, index: KeyIndex, token_bytes: list[bytes]):
        self._index, self._bytes = index, token_bytes
        self._fed: list[int] = []
        self._reset()

    def _reset(self) -> None:
        self._stack: list[_Frame] = []
        self._in_string = self._string_is_key = self._escape = False
        self._key = bytearray()

    def feed(self, token_id: int) -> None:
        self._fed.append(token_id)
        self._scan(self._bytes[token_id])

    def rollback(self, num_tokens: int) -> None:
        """Forget the last num_tokens tokens (rescans the rest: rollbacks are rare)."""
        if num_tokens:
            kept = self._fed[:-num_tokens]
            self._fed = []
            self._reset()
            for t in kept:
                self.feed(t)

    def trim(self, row: torch.Tensor) -> None:
        """Clear, in one (W,) int32 bitmask row, the tokens that would repeat a key of the open object."""
        banned = self._banned()
        if not banned:
            return
        before = row.clone()
        for t in banned:
            if t // 32 < row.numel():
                word = int(row[t // 32]) & ~(1 << (t % 32)) & 0xFFFFFFFF
                row[t // 32] = word - (1 << 32) if word >= 1 << 31 else word
        if not bool(row.any()):
            row.copy_(before)

    def _banned(self) -> list[int]:
        if not self._stack or not self._stack[-1].is_object or not self._stack[-1].keys:
            return []
        held = self._stack[-1].keys
        if self._in_string:
            if not self._string_is_key or self._escape:
                return []
            written = bytes(self._key)
            return [t for k in held if k.startswith(written) for t in self._index.closing.get(k[len(written):], ())]
        return [t for k in held for t in self._index.whole.get(k, ())]

    def _scan(self, data: bytes) -> None:
        for c in data:
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif c == 0x5C:                       # backslash
                    self._escape = True
                elif c == 0x22:                       # the closing quote
                    self._in_string = False
                    if self._string_is_key:
                        self._stack[-1].keys.add(bytes(self._key))
                        self._stack[-1].expecting_key = False
                    continue
                if self._string_is_key:
                    self._key.append(c)
            elif c == 0x22:
                top = self._stack[-1] if self._stack else None
                self._in_string = True
                self._string_is_key = bool(top and top.is_object and top.expecting_key)
                self._key.clear()
            elif c in b"{[":
                self._stack.append(_Frame(is_object=c == 0x7B))
            elif c in b"}]":
                if self._stack:
                    self._stack.pop()
            elif c == 0x2C and self._stack and self._stack[-1].is_object:
                self._stack[-1].expecting_key = True
