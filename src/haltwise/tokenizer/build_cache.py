"""A cache of tokenizers built from GGUF metadata, so the second start reads one JSON file.

Building Gemma 3's 262k-piece SentencePiece tokenizer means rebuilding ~515k merges from the
vocabulary; reading the built tokenizer.json back takes a fraction of that. A byte-level BPE reads its
merges from the file but still builds 3x slower than its tokenizer.json loads (Qwen2.5's 151k vocabulary:
2.2 s built, 0.8 s cached; SmolLM2's 49k: 0.73 s vs 0.21 s). Every vocabulary of MIN_CACHED_VOCAB pieces
or more is cached (`worth_caching`); a small one builds in milliseconds. Entries are
keyed by the file's identity (resolved path, size, mtime) plus the builder and `tokenizers`
versions, so a changed file or a new builder is a miss, never a stale hit.

    $HALTWISE_CACHE_DIR/tokenizers/<key>.tokenizer.json   the `tokenizers` serialization
    $HALTWISE_CACHE_DIR/tokenizers/<key>.facts.json       bos/eos/chat template/... (written last)

HALTWISE_TOKENIZER_CACHE=0 turns it off. Writes are atomic (temp file + rename); a cache that cannot
be written, or an entry that cannot be read, is only logged.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import Tokenizer as _HFTokenizer

log = logging.getLogger("haltwise.tokenizer")

BUILDER_VERSION = 1  # bump when a builder's output changes for the same file
MIN_CACHED_VOCAB = 16384  # smaller rebuilt vocabularies build faster than a cache entry is worth


def worth_caching(meta: dict[str, Any]) -> bool:
    """True for a large vocabulary, SentencePiece or byte-level BPE alike (the second start reads JSON)."""
    return len(meta.get("tokenizer.ggml.tokens", ())) >= MIN_CACHED_VOCAB


def entry_key(gguf: Path) -> str | None:
    """The cache key of a GGUF file, or None when caching is off."""
    if os.environ.get("HALTWISE_TOKENIZER_CACHE", "1") == "0":
        return None
    st = gguf.stat()
    ident = f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|{BUILDER_VERSION}|{tokenizers.__version__}"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def _root() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "tokenizers"


def load(key: str | None) -> tuple[_HFTokenizer, dict[str, Any]] | None:
    """(backend, facts) of a cached entry, or None on a miss or an unreadable entry."""
    if key is None:
        return None
    facts_path, json_path = _root() / f"{key}.facts.json", _root() / f"{key}.tokenizer.json"
    if not facts_path.is_file():
        return None
    try:
        return _HFTokenizer.from_file(str(json_path)), json.loads(facts_path.read_text(encoding="utf-8"))
    except Exception as e:  # OSError, JSON errors, and the Exception tokenizers raises for a bad file
        log.warning("ignoring tokenizer cache entry %s: %s", key, e)
        return None


def store(key: str | None, backend: _HFTokenizer, facts: dict[str, Any]) -> None:
    if key is None:
        return
    root = _root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        for suffix, text in ((".tokenizer.json", backend.to_str()), (".facts.json", json.dumps(facts))):
            tmp = root / f".{key}{suffix}.{os.getpid()}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, root / f"{key}{suffix}")
    except OSError as e:
        log.warning("could not write tokenizer cache %s: %s", root, e)
