"""The llguidance backend (MIT, Rust, one abi3 wheel): JSON Schema, regex, choice and Lark/GBNF grammars.

The LLTokenizer is built from the model's own `tokenizers` JSON once per engine (~0.8 s for a 49k
vocabulary, on first use), with every end-of-generation id as an end token. Compiled grammars are
validated once and kept in an LRU keyed by the constraint (thread-safe: request handlers compile
while the engine thread makes matchers).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import llguidance as llg
import torch
from llguidance.gbnf_to_lark import any_to_lark

from haltwise.structured.closing import MAX_CLOSING_TOKENS, allowed_ids, closing_rank, ideal_close
from haltwise.structured.schema_check import check_schema
from haltwise.structured.spec import BOUNDED_JSON_WHITESPACE, StructuredOutputs, StructureError
from haltwise.structured.unique_keys import KeyIndex, UniqueKeys
from haltwise.tokenizer.tokenizer import Tokenizer

GRAMMAR_CACHE_SIZE = 256


class LLGuidanceMatcher:
    def __init__(self, spec: StructuredOutputs, matcher: "llg.LLMatcher", backend: "LLGuidanceBackend | None" = None):
        self.spec = spec
        self._m = matcher
        self._backend = backend
        self._keys = backend.unique_keys() if backend is not None and spec.kind in ("json", "json_object") else None

    def consume(self, token_id: int) -> bool:
        ok = bool(self._m.consume_token(token_id))
        if ok and self._keys is not None:
            self._keys.feed(token_id)
        return ok

    @property
    def is_complete(self) -> bool:
        return self._m.is_stopped() and not self._m.is_error()

    @property
    def error(self) -> str:
        return self._m.get_error() if self._m.is_error() else ""

    def rollback(self, num_tokens: int) -> bool:
        """Undo the last num_tokens consumed tokens (a cut moved back); False if llguidance cannot."""
        if num_tokens == 0:
            return True
        if not self._m.rollback(num_tokens):
            return False
        if self._keys is not None:
            self._keys.rollback(num_tokens)
        return True

    def close(self, text: str) -> list[int] | None:
        """The tokens that complete the structure after `text` (what it consumed), chosen by
        structured/closing.py, and consumed: the matcher is then complete. None (the matcher untouched)
        when no completion is found."""
        if self._backend is None or self._m.is_error():
            return None
        trial = LLGuidanceMatcher(self.spec, self._m.deep_copy())
        rank, width = self._backend.closing_rank(), self._backend.vocab_size
        row = torch.zeros((width + 31) // 32, dtype=torch.int32)
        ids: list[int] = []
        while not trial._m.is_stopped():
            if trial._m.is_accepting():
                if not trial._m.consume_token(self._backend.end_token):
                    return None
                break
            if len(ids) == MAX_CLOSING_TOKENS:
                return None
            trial.fill_row(row)
            pick = self._backend.ideal_token(ideal_close(text), row)
            if pick is None:
                allowed = allowed_ids(row, width)
                if allowed.numel() == 0:
                    return None
                pick = int(allowed[torch.argmin(rank[allowed])])
            if int(rank[pick]) >= 2 ** 62 or not trial._m.consume_token(pick):
                return None
            ids.append(pick)
            text += self._backend.token_text(pick)
        self._m = trial._m
        return ids

    def fill_row(self, row: torch.Tensor) -> None:
        """row: (W,) int32, contiguous. A matcher that cannot continue gets an all-zero row (no legal token);
        llguidance itself would allow only the end token then, which would pass an unfinished structure as done."""
        self._m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
        if self._m.is_error():
            row.zero_()
        elif self._keys is not None:     # no key an open object already holds (unique_keys.py)
            self._keys.trim(row)


@dataclass(frozen=True)
class LLGuidanceGrammar:
    spec: StructuredOutputs
    _prototype: "llg.LLMatcher"        # never advanced: new matchers are deep copies of it

    _backend: "LLGuidanceBackend | None" = None

    def new_matcher(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self.spec, self._prototype.deep_copy(), self._backend)


class LLGuidanceBackend:
    name = "llguidance"

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: frozenset[int],
                 cache_size: int = GRAMMAR_CACHE_SIZE):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size            # logits width (may exceed the tokenizer's vocabulary)
        self._eos = sorted(eos_token_ids)
        self._lltok: llg.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, LLGuidanceGrammar] = OrderedDict()
        self._cache_size = cache_size
        self._rank: torch.Tensor | None = None   # closing ranks (structured/closing.py), built on first use
        self._by_text: dict[str, int] = {}        # token text -> lowest id spelling it (with _rank)
        self._key_tables: tuple[KeyIndex, list[bytes]] | None = None   # unique_keys.py, built on first use

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def end_token(self) -> int:
        return self._eos[0]

    def closing_rank(self) -> torch.Tensor:
        with self._lock:
            if self._rank is None:
                texts = [self._tokenizer.token_bytes(i) for i in range(self._tokenizer.vocab_size)]
                never = frozenset(self._eos) | frozenset(self._tokenizer.special_token_texts().values())
                self._rank = closing_rank(texts, self._vocab_size, never)
                self._by_text = {}
                for i, raw in enumerate(texts):
                    if i not in never and raw:
                        self._by_text.setdefault(raw.decode("utf-8", errors="replace"), i)
            return self._rank

    def unique_keys(self) -> UniqueKeys:
        """A fresh duplicate-key guard for one JSON answer (the tokenizer's tables are built once)."""
        with self._lock:
            if self._key_tables is None:
                raw = [self._tokenizer.token_bytes(i) for i in range(self._tokenizer.vocab_size)]
                raw += [b""] * max(0, self._vocab_size - len(raw))
                self._key_tables = KeyIndex(raw), raw
            return UniqueKeys(*self._key_tables)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")

    def ideal_token(self, ideal: str, row: torch.Tensor) -> int | None:
        """The longest allowed token (in `row`'s bitmask) spelling a prefix of `ideal`, or None."""
        for k in range(len(ideal), 0, -1):
            i = self._by_text.get(ideal[:k])
            if i is not None and (int(row[i >> 5]) >> (i & 31)) & 1:
                return i
        return None

    def _lltokenizer(self) -> "llg.LLTokenizer":
        with self._lock:
            if self._lltok is None:
                self._lltok = llg.LLTokenizer(self._tokenizer.backend_json(), n_vocab=self._vocab_size,
                                              eos_token=self._eos)
            return self._lltok

    def compile(self, spec: StructuredOutputs) -> LLGuidanceGrammar:
        key = spec.cache_key
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit if hit.spec == spec else LLGuidanceGrammar(spec, hit._prototype, self)
        lltok = self._lltokenizer()
        grammar = _grammar_text(spec)
        failed, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
        if failed:
            raise StructureError(spec.param, f"invalid {spec.kind}: {messages[0]}")
        if messages and spec.kind in ("json", "json_object"):
            raise StructureError(spec.param, f"the schema would not be enforced exactly: {'; '.join(messages)}")
        prototype = llg.LLMatcher(lltok, grammar, log_level=0)
        if prototype.is_error():
            raise StructureError(spec.param, f"invalid {spec.kind}: {prototype.get_error()}")
        first = torch.zeros(1, (self._vocab_size + 31) // 32, dtype=torch.int32)
        LLGuidanceMatcher(spec, prototype.deep_copy()).fill_row(first[0])
        if not bool(first.any()):
            raise StructureError(spec.param, f"the {spec.kind} matches no text at all (unsatisfiable)")
        compiled = LLGuidanceGrammar(spec, prototype, self)
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled

    @property
    def cache_len(self) -> int:
        return len(self._cache)

    def fill_bitmask(self, matchers: list[LLGuidanceMatcher], bitmask: torch.Tensor) -> None:
        for i, m in enumerate(matchers):
            m.fill_row(bitmask[i])


def _grammar_text(spec: StructuredOutputs) -> str:
    """The llguidance grammar for a constraint; JSON Schemas are checked for unenforced keywords first."""
    if spec.kind in ("json", "json_object"):
        schema = spec.schema
        check_schema(schema, spec.param)
        if spec.disable_any_whitespace:
            options = {"whitespace_flexible": False}
        else:
            options = {"whitespace_pattern": spec.whitespace_pattern or BOUNDED_JSON_WHITESPACE}
        try:
            return llg.LLMatcher.grammar_from_json_schema(schema, defaults=options)
        except ValueError as e:
            raise StructureError(spec.param, f"invalid json_schema: {e}") from None
    if spec.kind == "regex":
        return llg.LLMatcher.grammar_from_regex(spec.regex)
    if spec.kind == "choice":
        return llg.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in spec.choice))
    try:
        lark = any_to_lark(spec.grammar)   # GBNF (llama.cpp's EBNF) is converted; Lark passes through
    except Exception as e:  # the converter raises plain exceptions for malformed GBNF
        raise StructureError(spec.param, f"invalid grammar: {e}") from None
    return llg.LLMatcher.grammar_from_lark(lark)
