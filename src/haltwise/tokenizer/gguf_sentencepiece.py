"""A GGUF SentencePiece BPE (`tokenizer.ggml.model = llama`) rebuilt as transformers' GGUF loader does.

The pieces are kept as the file spells them ("▁the", "<0x0A>"), in a `tokenizers` BPE with byte
fallback: a character no piece covers is encoded as its UTF-8 bytes, one `<0xNN>` token each, and
the decoder turns runs of those back into text (Replace "▁" -> " ", ByteFallback, Fuse). GGUF files
carry no merges for these vocabularies, so the merges are rebuilt from the vocabulary: every way to
cut a piece into two pieces that are both in the vocabulary is a merge, ranked by the piece's rank.

Two flavours, chosen by architecture as transformers does:
- Gemma (gemma, gemma2, gemma3): spaces are replaced by "▁" by a normalizer and never prepended; a
  piece of 2+ spaces is stored as real spaces and is respelled as "▁"s first; pieces rank by their
  position in the file (Gemma's scores do not follow its merge order).
- Llama/Mistral-style: a Metaspace pre-tokenizer prepends "▁" to the first word (prepend_scheme
  "first"), the decoder strips that one leading space again, and pieces rank by their score.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenizers import decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

from haltwise.tokenizer.gguf_vocab import add_marked_tokens

GEMMA_ARCHITECTURES = frozenset({"gemma", "gemma2", "gemma3"})
SPACE = "\u2581"  # "▁", SentencePiece's visible space


def sentencepiece_backend(meta: Mapping[str, Any]) -> _HFTokenizer:
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    gemma = meta.get("general.architecture") in GEMMA_ARCHITECTURES
    pieces = [SPACE * len(t) if " " in t and not t.strip() else t for t in tokens] if gemma else list(tokens)
    vocab = {t: i for i, t in enumerate(pieces)}  # a repeated piece keeps its last id (as a dict build does)
    if "tokenizer.ggml.merges" in meta:
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    elif gemma:
        merges = rebuild_merges(vocab, {t: -i for i, t in enumerate(pieces)})
    else:
        merges = rebuild_merges(vocab, dict(zip(pieces, meta["tokenizer.ggml.scores"])))
    unk = "<unk>" if gemma else None
    backend = _HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if gemma:
        backend.normalizer = normalizers.Replace(" ", SPACE)
        backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    else:
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False)
        steps.append(decoders.Strip(content=" ", left=1))
    backend.decoder = decoders.Sequence(steps)
    add_marked_tokens(backend, tokens, types, keep_control=lambda t: True)
    return backend


def rebuild_merges(vocab: Mapping[str, int], rank: Mapping[str, float]) -> list[tuple[str, str]]:
    """Merges implied by a vocabulary: (left, right) for every split of a piece into two pieces.

    Order (transformers' `generate_merges` with scores): by the merged piece's `rank` value, highest
    first; among splits of one piece, the longer left part first.
    """
    scored: list[tuple[float, int, int, str, str]] = []
    for piece, score in rank.items():
        for cut in range(len(piece) - 1, 0, -1):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                scored.append((score, cut, len(right), left, right))
    scored.sort(key=lambda m: (m[0], m[1], m[2]), reverse=True)
    return [(m[3], m[4]) for m in scored]
