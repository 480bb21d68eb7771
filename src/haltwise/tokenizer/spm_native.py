"""Encode a Gemma-style SentencePiece BPE with the native encoder, so a start need not build its merge table.

`tokenizers` builds Gemma 3's BPE from 262k pieces and ~515k merges in ~0.5 s at every start (PyO3 and
its merge map, GIL held): most of a cached start's tokenizer time. For a vocabulary whose merges are
exactly the ones its pieces imply (gguf_sentencepiece.rebuild_merges ranked by id, as Gemma's are), the
native encoder (kernels/native/csrc/spm_bpe.cpp) computes the same ids from the vocabulary alone, in
~0.03 s, and without the GIL while it encodes. The `tokenizers` backend is then built without merges: it
still decodes, names tokens and lists the added ones, but never encodes; its whole JSON (merges included,
for llguidance and the like) is read from the build cache when first asked for.

`qualifies` is checked once, when the build cache stores the tokenizer: the pipeline must be Gemma's
(" " -> "▁" normalizer, Split(" ") pre-tokenizer, byte-fallback BPE, added tokens matched on raw text
with no strip or word rules), the merges must equal the implied ones, and the two encoders must agree on
SAMPLES. Anything else keeps encoding with `tokenizers`.
"""
from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from haltwise.tokenizer.gguf_sentencepiece import SPACE, rebuild_merges

log = logging.getLogger("haltwise.tokenizer")

NORMALIZER = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
PRE_TOKENIZER = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
SAMPLES = ("", " ", "  Hello  world ", "\n\n\nx\n", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
           "Ünïcödé 中文 𓀀 ☕ \u0007\t<0x0A> ▁▁x", "def f(x):\n    return x  # two  spaces\n")


def qualifies(spec: Mapping[str, Any], backend: _HFTokenizer, added: Sequence[Mapping[str, Any]]) -> bool:
    """True when the native encoder encodes exactly as `backend` (its `tokenizers` JSON is `spec`)."""
    model = spec["model"]
    if (spec.get("normalizer") != NORMALIZER or spec.get("pre_tokenizer") != PRE_TOKENIZER
            or model.get("type") != "BPE" or not model.get("byte_fallback") or model.get("ignore_merges")
            or model.get("dropout") is not None or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")):
        return False
    if any(t["normalized"] or t["lstrip"] or t["rstrip"] or t["single_word"] for t in added):
        return False
    vocab = model["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    if merges != rebuild_merges(vocab, {t: -i for t, i in vocab.items()}):
        return False
    if any("\0" in piece for piece in vocab):
        return False
    encoder = native_encoder("\0".join(vocab), array("i", vocab.values()).tobytes(), added)
    return encoder is not None and all(
        encoder.encode(text, False) == backend.encode(text, add_special_tokens=False).ids for text in SAMPLES)


def native_encoder(pieces: str, ids: bytes, added: Sequence[Mapping[str, Any]],
                   build: bool = True) -> Any | None:
    """The native SpmBpe over the NUL-joined pieces, their int32 ids and the added tokens (`tokenizers` JSON
    entries), or None without the native extension. build=False never compiles it (a tokenizer-only tool
    after an upgrade then encodes with `tokenizers` rather than wait for the compiler)."""
    from haltwise.kernels.native import build as native   # imports torch: only for a Gemma-style vocabulary

    module = native.load(build=build)
    if module is None:
        return None
    try:
        return module.SpmBpe(pieces.encode(), ids,
                             [(t["content"], t["id"], t["special"]) for t in added])
    except ValueError as e:    # a byte piece <0xNN> missing: byte fallback would need the unknown token
        log.warning("native SentencePiece encoder unavailable: %s", e)
        return None


class NativeSpm:
    """Encode with the native encoder; BOS/EOS framed as the merge-less `backend`'s post-processor frames."""

    def __init__(self, encoder: Any, backend: _HFTokenizer, full_json: Callable[[], str]):
        self._encoder = encoder
        self.full_json = full_json      # the whole `tokenizers` JSON, merges included
        bare = backend.encode("a", add_special_tokens=False).ids
        framed = backend.encode("a", add_special_tokens=True).ids
        at = next(i for i in range(len(framed)) if framed[i:i + len(bare)] == bare)
        self._prefix, self._suffix = framed[:at], framed[at + len(bare):]

    def encode(self, text: str, add_special_tokens: bool = True, specials_as_text: bool = False) -> list[int]:
        ids = self._encoder.encode(text, specials_as_text)
        return [*self._prefix, *ids, *self._suffix] if add_special_tokens else ids
