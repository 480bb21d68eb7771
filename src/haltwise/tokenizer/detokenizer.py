"""Incremental detokenization: token ids in, newly complete text out, O(new tokens) per step.

Invariant: "".join(step(chunk) for chunk in chunks) + flush() == tokenizer.decode(all ids,
skip_special_tokens) for any id sequence and any chunking.

Byte-level BPE (exact): every token stands for fixed bytes, and decode() is the UTF-8 decoding
(errors="replace") of their concatenation. Bytes go through an incremental UTF-8 decoder, which
emits every complete character and every ill-formed subpart (as U+FFFD) at once, and holds back
only a trailing incomplete-but-valid prefix of a character until its remaining bytes arrive:

    bytes so far:  ... 48 69 20 | e4 b8        <- held (could still become 中)
    next token:    96           -> emits "中"

Other tokenizers (SentencePiece from a GGUF or an HF dir): prefix-offset windows. The text of
ids[prefix:] minus the text of ids[prefix:read] is the new text; it is released only when it does not
end in U+FFFD (an incomplete byte-fallback character) and the window does not end in a byte-fallback
token (<0xNN>), and then prefix moves to read and read to the end. The window is a few tokens, so each
step decodes O(new tokens) ids. Decoding always starts at an already-released token, so decoder rules
that depend on position (a stripped leading space) agree with a whole-sequence decode.

Why a run of byte tokens is held whole: the ByteFallback decoder turns a run of consecutive <0xNN>
tokens into its UTF-8 text when the whole run is valid, and into one U+FFFD per byte otherwise, so
a later byte can change how earlier, complete characters of the same run decode:

    <0xE4> <0xB8> <0x96>          -> "中"
    <0xE4> <0xB8> <0x96> <0xFF>   -> "\ufffd\ufffd\ufffd\ufffd"   (one run, invalid as a whole)

So text is released only at a token that ends a run (any other token), never inside one.
"""
from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from haltwise.tokenizer.tokenizer import Tokenizer


class IncrementalDetokenizer:
    """One per output stream. Feed token ids with step(); call flush() once at the end."""

    def __init__(self, tokenizer: "Tokenizer", skip_special_tokens: bool = True, keep: frozenset[int] = frozenset()):
        """keep: special tokens shown even when skipping (a tool request's call markers)."""
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._skip = tokenizer.special_token_ids - keep if skip_special_tokens else frozenset()
        self._byte_level = tokenizer.is_byte_level
        self._byte_pieces = tokenizer.byte_fallback_ids  # <0xNN> tokens (empty for byte-level BPE)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Prefix-offset state (non-byte-level only):
        #   ids:  [ ... released ... | prefix ... read | unreleased ... ]
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def step(self, new_token_ids: list[int]) -> str:
        """Text completed by these tokens (may be "" while a character or window is incomplete)."""
        kept = [i for i in new_token_ids if i not in self._skip]
        if not kept:
            return ""
        if self._byte_level:
            return self._utf8.decode(b"".join(self.tokenizer.token_bytes(i) for i in kept))
        self._ids.extend(kept)
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        full_text = self._decode(self._ids[self._prefix:])
        in_byte_run = self._ids[-1] in self._byte_pieces
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd") or in_byte_run:
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return full_text[len(prefix_text):]

    def flush(self) -> str:
        """Whatever is held back, decoded as decode() would (U+FFFD for an unfinished character)."""
        if self._byte_level:
            return self._utf8.decode(b"", final=True)
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        full_text = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return full_text[len(prefix_text):]

    def _decode(self, ids: list[int]) -> str:
        # Special ids were filtered in step(), so nothing is skipped here.
        return self.tokenizer.decode(ids, skip_special_tokens=False)
