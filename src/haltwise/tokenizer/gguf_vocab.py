"""Pieces every GGUF tokenizer build shares: marked tokens, BOS/EOS on encode, the special-token strings.

GGUF `tokenizer.ggml.token_type` values (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined,
5 unused, 6 byte. As transformers' GGUF loader does: control tokens become special added tokens (kept
whole on encode, dropped by decode(skip_special_tokens=True)), user-defined ones plain added tokens
(kept whole, decoded as text), each only if the built vocabulary spells it the same way.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tokenizers import AddedToken, processors
from tokenizers import Tokenizer as _HFTokenizer

CONTROL, USER_DEFINED = 3, 4


def add_marked_tokens(backend: _HFTokenizer, tokens: list[str], types: list[int],
                      keep_control: Callable[[str], bool]) -> None:
    """Add the file's control tokens (those `keep_control` accepts) as special, then its user-defined ones."""
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                for t, ty in zip(tokens, types) if ty == CONTROL and keep_control(t)])
    vocab = backend.get_vocab(with_added_tokens=True)
    backend.add_tokens([AddedToken(t, normalized=False, special=False)
                        for t, ty in zip(tokens, types) if ty == USER_DEFINED and t in vocab])


def add_named_special_tokens(backend: _HFTokenizer, texts: list[str | None]) -> None:
    """Make the file's bos/eos/unk/pad tokens special (transformers does, whatever their token_type).

    Only tokens already in the vocabulary: a new id would lie outside the model's embedding.
    """
    added = {t.content for t in backend.get_added_tokens_decoder().values()}
    vocab = backend.get_vocab(with_added_tokens=False)
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                for t in dict.fromkeys(texts) if t and t in vocab and t not in added])


def token_text(meta: Mapping[str, Any], key: str) -> str | None:
    """The text of the token whose id metadata key `tokenizer.ggml.<key>` names, or None."""
    tokens = meta["tokenizer.ggml.tokens"]
    i = meta.get(f"tokenizer.ggml.{key}")
    return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None


def set_post_processor(backend: _HFTokenizer, bos: str | None, eos: str | None) -> None:
    """Add BOS/EOS around a single sequence (and each of a pair) on encode(add_special_tokens=True)."""
    def around(seq: str, type_id: int) -> list[str]:
        return [*([f"{bos}:{type_id}"] if bos else []), f"${seq}:{type_id}", *([f"{eos}:{type_id}"] if eos else [])]

    single = " ".join(around("A", 0))
    pair = " ".join(around("A", 0) + around("B", 1))
    specials = [(t, backend.token_to_id(t)) for t in dict.fromkeys(t for t in (bos, eos) if t)]
    backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
