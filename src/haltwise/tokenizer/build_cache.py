"""A cache of tokenizers built from GGUF metadata, so the second start reads the built one back.

Building Gemma 3's 262k-piece SentencePiece tokenizer means rebuilding ~515k merges from the
vocabulary; reading the built tokenizer.json back takes a fraction of that. A byte-level BPE reads its
merges from the file but still builds 3x slower than its tokenizer.json loads (Qwen2.5's 151k vocabulary:
2.2 s built, 0.8 s cached; SmolLM2's 49k: 0.73 s vs 0.21 s). Every vocabulary of MIN_CACHED_VOCAB pieces
or more is cached (`worth_caching`); a small one builds in milliseconds. Entries are
keyed by the file's identity (resolved path, size, mtime) plus the builder, `tokenizers` and Python
versions, so a changed file or a new builder is a miss, never a stale hit.

    $HALTWISE_CACHE_DIR/tokenizers/<key>.bpe.marshal      a BPE: its vocabulary, merges, options, added tokens
    $HALTWISE_CACHE_DIR/tokenizers/<key>.pipeline.json    ... and the rest of it (`tokenizers` JSON)
    $HALTWISE_CACHE_DIR/tokenizers/<key>.tokenizer.json   or the whole `tokenizers` serialization (also kept
                                                          beside a BPE the native encoder encodes)
    $HALTWISE_CACHE_DIR/tokenizers/<key>.facts.json       bos/eos/chat template/... (written last)

A Gemma-style SentencePiece BPE whose merges its pieces imply (spm_native.qualifies, checked when the entry
is written) is marked so: its backend is rebuilt without merges and the native encoder encodes (Gemma 3:
~0.27 s instead of ~0.74 s). Any other BPE is rebuilt from its marshalled vocabulary and merges, because
`tokenizers` takes those ~2x faster as Python objects than as JSON (Gemma 3: 1.0 vs 1.4-2.0 s here). The
pieces and merges are marshalled as NUL-joined strings and the ids as an int32 array: unmarshalling 262k
pieces and 515k merge pairs as objects took 0.40 s, splitting the strings ~0.1 s. The split is stored only when the rebuilt tokenizer
serializes exactly as the original (checked once, when the entry is written) and no piece contains a NUL;
any other tokenizer is stored whole.

HALTWISE_TOKENIZER_CACHE=0 turns it off. Writes are atomic (temp file + rename); a cache that cannot
be written, or an entry that cannot be read, is only logged.
"""
from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
import sys
from array import array
from pathlib import Path
from typing import Any, NamedTuple

import tokenizers
from tokenizers import AddedToken
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers.models import BPE

from haltwise.tokenizer import spm_native

log = logging.getLogger("haltwise.tokenizer")

BUILDER_VERSION = 4  # bump when a builder's output changes for the same file
MIN_CACHED_VOCAB = 16384  # smaller rebuilt vocabularies build faster than a cache entry is worth


def worth_caching(meta: dict[str, Any]) -> bool:
    """True for a large vocabulary, SentencePiece or byte-level BPE alike (the second start reads JSON)."""
    return len(meta.get("tokenizer.ggml.tokens", ())) >= MIN_CACHED_VOCAB


def entry_key(gguf: Path) -> str | None:
    """The cache key of a GGUF file, or None when caching is off."""
    if os.environ.get("HALTWISE_TOKENIZER_CACHE", "1") == "0":
        return None
    st = gguf.stat()
    ident = (f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|{BUILDER_VERSION}|{tokenizers.__version__}"
             f"|{sys.version_info[:2]}")     # marshal's format is the interpreter's
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def _root() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "tokenizers"


class Entry(NamedTuple):
    backend: _HFTokenizer
    facts: dict[str, Any]
    native: spm_native.NativeSpm | None   # encodes instead of `backend`, which then has no merges


def load(key: str | None) -> Entry | None:
    """A cached entry, or None on a miss or an unreadable entry."""
    if key is None:
        return None
    facts, pipeline, bpe, whole = (_root() / f"{key}{suffix}" for suffix in _SUFFIXES)
    if not facts.is_file():
        return None
    try:
        native = None
        if not bpe.is_file():
            backend = _HFTokenizer.from_file(str(whole))
        else:
            shell, parts = pipeline.read_text(encoding="utf-8"), marshal.loads(bpe.read_bytes())
            encoder = (spm_native.native_encoder(parts["pieces"], parts["ids"], parts["added_tokens"],
                                                 build=False) if parts.get("native_spm") and whole.is_file() else None)
            backend = _rebuild_bpe(shell, parts, with_merges=encoder is None)
            if encoder is not None:
                native = spm_native.NativeSpm(encoder, backend, lambda: _whole_json(whole, shell, bpe))
        return Entry(backend, json.loads(facts.read_text(encoding="utf-8")), native)
    except Exception as e:  # OSError, JSON/marshal errors, and the Exception tokenizers raises for a bad file
        log.warning("ignoring tokenizer cache entry %s: %s", key, e)
        return None


def store(key: str | None, backend: _HFTokenizer, facts: dict[str, Any]) -> None:
    if key is None:
        return
    root = _root()
    whole = backend.to_str()
    pipeline, bpe, native = _split_bpe(whole, backend)
    parts = ({".bpe.marshal": bpe, ".pipeline.json": pipeline.encode()} if bpe is not None
             else {".tokenizer.json": pipeline.encode()})
    if native:
        parts[".tokenizer.json"] = whole.encode()
    try:
        root.mkdir(parents=True, exist_ok=True)
        for suffix, data in (*parts.items(), (".facts.json", json.dumps(facts).encode())):
            tmp = root / f".{key}{suffix}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, root / f"{key}{suffix}")
    except OSError as e:
        log.warning("could not write tokenizer cache %s: %s", root, e)


_SUFFIXES = (".facts.json", ".pipeline.json", ".bpe.marshal", ".tokenizer.json")
_SEP = "\0"   # joins the marshalled pieces and merge halves; a vocabulary with a NUL in a piece is stored whole
_BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
                "ignore_merges")


def _split_bpe(whole: str, backend: _HFTokenizer) -> tuple[str, bytes | None, bool]:
    """(pipeline JSON, marshalled BPE, whether the native encoder encodes it) when the two rebuild exactly
    `whole` (the JSON of `backend`); else (whole, None, False)."""
    spec = json.loads(whole)
    model = spec["model"]
    if model.get("type") != "BPE" or set(model) - {"type", "vocab", "merges", *_BPE_OPTIONS}:
        return whole, None, False
    merges = [part for m in model["merges"] for part in (m.split(" ", 1) if isinstance(m, str) else m)]
    if any(_SEP in text for text in (*model["vocab"], *merges)):
        return whole, None, False
    native = spm_native.qualifies(spec, backend, spec["added_tokens"])
    bpe = marshal.dumps({"pieces": _SEP.join(model["vocab"]), "ids": array("i", model["vocab"].values()).tobytes(),
                         "merges": _SEP.join(merges),
                         "options": {k: model[k] for k in _BPE_OPTIONS if model.get(k) is not None},
                         "added_tokens": spec["added_tokens"], "native_spm": native})
    pipeline = json.dumps(dict(spec, model=dict(model, vocab={}, merges=[]), added_tokens=[]), ensure_ascii=False)
    try:
        exact = json.loads(_rebuild_bpe(pipeline, marshal.loads(bpe)).to_str()) == spec
    except Exception:   # whatever the rebuild cannot take is stored whole
        exact = False
    return (pipeline, bpe, native) if exact else (whole, None, False)


def _rebuild_bpe(pipeline: str, bpe: dict[str, Any], with_merges: bool = True) -> _HFTokenizer:
    """The tokenizer of _split_bpe's two parts: the BPE model built from Python objects (without its merges
    when the native encoder encodes), the pipeline's normalizer, pre-tokenizer, post-processor and decoder,
    then the added tokens (their ids are the vocab's)."""
    shell = _HFTokenizer.from_str(pipeline)
    halves = iter(_unjoin(bpe["merges"]) if with_merges else ())
    vocab = dict(zip(_unjoin(bpe["pieces"]), array("i", bpe["ids"]), strict=True))
    backend = _HFTokenizer(BPE(vocab=vocab, merges=list(zip(halves, halves, strict=True)), **bpe["options"]))
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        setattr(backend, part, getattr(shell, part))
    added = [(AddedToken(t["content"], single_word=t["single_word"], lstrip=t["lstrip"], rstrip=t["rstrip"],
                         normalized=t["normalized"], special=t["special"]), t["special"]) for t in bpe["added_tokens"]]
    backend.add_special_tokens([token for token, special in added if special])
    backend.add_tokens([token for token, special in added if not special])
    return backend


def _whole_json(whole: Path, pipeline: str, bpe: Path) -> str:
    """The whole `tokenizers` JSON of a native entry; rebuilt from its parts if the file went missing since."""
    try:
        return whole.read_text(encoding="utf-8")
    except OSError:
        return _rebuild_bpe(pipeline, marshal.loads(bpe.read_bytes())).to_str()


def _unjoin(text: str) -> list[str]:
    """The strings _SEP.join() was given (none for "")."""
    return text.split(_SEP) if text else []
