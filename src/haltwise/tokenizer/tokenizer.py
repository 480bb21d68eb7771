"""The tokenizer facade: the model's own vocabulary, from GGUF metadata or a Hugging Face directory.

Built on the `tokenizers` library, from a GGUF the way transformers' GGUF loader builds it:
`tokenizer.ggml.model = gpt2` is a byte-level BPE (gguf_bpe.py), `llama` a SentencePiece BPE with
byte fallback (gguf_sentencepiece.py). BOS/EOS are added on encode only when
`tokenizer.ggml.add_bos_token` / `add_eos_token` say so (a SentencePiece file without the flag adds
BOS, as llama.cpp does). A GGUF tokenizer is cached after its first build (build_cache.py);
`build_source` and `build_seconds` say which happened and how long it took.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders

from haltwise.tokenizer import build_cache
from haltwise.tokenizer.byte_alphabet import token_string_to_bytes
from haltwise.tokenizer.chat import ChatTemplate
from haltwise.tokenizer.gguf_bpe import PRE_TOKENIZER_SPLITS, byte_level_backend
from haltwise.gguf.file import read_gguf_metadata
from haltwise.tokenizer.gguf_sentencepiece import sentencepiece_backend
from haltwise.tokenizer.spm_native import NativeSpm
from haltwise.tokenizer.gguf_vocab import add_named_special_tokens, set_post_processor, token_text

# Control tokens that end a turn or a document in common model families (SPEC §2's eos set).
END_OF_GENERATION_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>", "<end_of_turn>",
    "<|eom_id|>", "<|return|>", "<eos>",
)
# gpt-oss's harmony format (a vocabulary with <|channel|>): <|end|> closes one message (the analysis) and the
# reply goes on with the next; <|return|> ends the reply and <|call|> ends it with a tool call (as llama.cpp).
HARMONY_MARKER, HARMONY_NOT_END, HARMONY_ENDS = "<|channel|>", "<|end|>", ("<|return|>", "<|call|>")
GGUF_BUILDERS = {"gpt2": byte_level_backend, "llama": sentencepiece_backend}

__all__ = ["END_OF_GENERATION_TOKENS", "PRE_TOKENIZER_SPLITS", "Tokenizer"]


class Tokenizer:
    """Encode, decode, special tokens, eos set and chat template of one model."""

    def __init__(self, backend: _HFTokenizer, *, bos_token: str | None, eos_token: str | None,
                 chat_template: str | None = None, generation_eos: Iterable[int] = (),
                 extra_template_tokens: Mapping[str, str | None] | None = None, native: NativeSpm | None = None):
        """Prefer `from_gguf` / `from_hf_dir`. `backend` already carries its post-processor (BOS/EOS policy).
        With `native` (a cached Gemma-style vocabulary, spm_native.py), that encodes and `backend` has no merges."""
        self._tk = backend
        self._native = native
        self._plain: _HFTokenizer | None = None   # encode_as_text's backend copy, built on first use
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id: int | None = backend.token_to_id(bos_token) if bos_token else None
        self.eos_token_id: int | None = backend.token_to_id(eos_token) if eos_token else None
        self.generation_eos: tuple[int, ...] = tuple(int(i) for i in generation_eos)
        added = backend.get_added_tokens_decoder()
        # Exactly the ids that decode(skip_special_tokens=True) drops.
        self.special_token_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self.is_byte_level: bool = isinstance(backend.decoder, decoders.ByteLevel)
        # SentencePiece byte-fallback pieces "<0x00>".."<0xFF>" (a run of them decodes as one UTF-8 string).
        self.byte_fallback_ids: frozenset[int] = frozenset(
            i for b in range(256) if (i := backend.token_to_id(f"<0x{b:02X}>")) is not None
        ) if getattr(backend.model, "byte_fallback", False) else frozenset()
        self._token_bytes: list[bytes] | None = None  # filled on first use (byte-level only)
        self.build_source: str = "built"  # "cache" when from_gguf read a cached build
        self.build_seconds: float = 0.0   # construction time in from_gguf / from_gguf_metadata
        template_tokens = {"bos_token": bos_token, "eos_token": eos_token, **(extra_template_tokens or {})}
        self._template_tokens = template_tokens
        self.chat_template: ChatTemplate | None = (
            ChatTemplate(chat_template, template_tokens) if chat_template else None)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        """The tokenizer described by a GGUF file's metadata, from the build cache when it has it."""
        start = time.perf_counter()
        key = build_cache.entry_key(Path(path))
        hit = build_cache.load(key)
        native = None
        if hit is not None:
            backend, facts, native = hit
            source = "cache"
        else:
            meta = read_gguf_metadata(path)
            backend, facts = build_gguf_backend(meta)
            if build_cache.worth_caching(meta):
                build_cache.store(key, backend, facts)
            source = "built"
        tokenizer = cls(backend, **facts, native=native)
        tokenizer.build_source, tokenizer.build_seconds = source, time.perf_counter() - start
        return tokenizer

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> "Tokenizer":
        """As from_gguf, from already-read metadata (never cached)."""
        start = time.perf_counter()
        backend, facts = build_gguf_backend(meta)
        tokenizer = cls(backend, **facts)
        tokenizer.build_seconds = time.perf_counter() - start
        return tokenizer

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> "Tokenizer":
        """tokenizer.json (+ tokenizer_config.json, chat_template.jinja, generation_config.json) of a local dir.

        BOS/EOS on encode follow tokenizer.json's own post-processor.
        """
        root = Path(path)
        backend = _HFTokenizer.from_file(str(root / "tokenizer.json"))
        config = _read_json(root / "tokenizer_config.json")
        gen = _read_json(root / "generation_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: use "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")
        eos_ids = gen.get("eos_token_id")
        eos_ids = [] if eos_ids is None else [eos_ids] if isinstance(eos_ids, int) else list(eos_ids)
        return cls(backend, bos_token=_token_text(config.get("bos_token")),
                   eos_token=_token_text(config.get("eos_token")), chat_template=template,
                   generation_eos=eos_ids,
                   extra_template_tokens={"unk_token": _token_text(config.get("unk_token")),
                                          "pad_token": _token_text(config.get("pad_token"))})

    # ---- encode / decode ----------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special-token text in it (e.g. "<|im_start|>") becomes that token."""
        if self._native is not None:
            return self._native.encode(text, add_special_tokens)
        return self._tk.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_as_text(self, text: str) -> list[int]:
        """Token ids of `text` with special-token text read as plain characters (no BOS/EOS)."""
        if self._native is not None:
            return self._native.encode(text, add_special_tokens=False, specials_as_text=True)
        if self._plain is None:
            self._plain = _HFTokenizer.from_str(self.backend_json())
            self._plain.encode_special_tokens = True
        return self._plain.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`; invalid UTF-8 becomes U+FFFD (one per maximal ill-formed subpart)."""
        return self._tk.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self._tk.id_to_token(i)

    def token_to_id(self, s: str) -> int | None:
        return self._tk.token_to_id(s)

    def token_bytes(self, i: int) -> bytes:
        """The bytes token `i` stands for (byte-level); for other tokenizers, the UTF-8 of its decoded text."""
        if not self.is_byte_level:
            return self._tk.decode([i], skip_special_tokens=False).encode("utf-8")
        if self._token_bytes is None:
            self._token_bytes = [token_string_to_bytes(self._tk.id_to_token(j) or "") for j in range(self.vocab_size)]
        return self._token_bytes[i]

    # ---- special tokens -----------------------------------------------------------------------
    def backend_json(self) -> str:
        """The `tokenizers` JSON of this vocabulary (for libraries that build their own view, e.g. llguidance)."""
        return self._native.full_json() if self._native is not None else self._tk.to_str()

    def eos_token_ids(self, generation_eos: Iterable[int] = ()) -> frozenset[int]:
        """SPEC §2 eos set: tokenizer eos | generation-config eos | end-of-generation control tokens."""
        ids = {int(i) for i in (*self.generation_eos, *generation_eos)}
        if self.eos_token_id is not None:
            ids.add(self.eos_token_id)
        harmony = self._tk.token_to_id(HARMONY_MARKER) in self.special_token_ids
        for text in (*END_OF_GENERATION_TOKENS, *HARMONY_ENDS) if harmony else END_OF_GENERATION_TOKENS:
            i = self._tk.token_to_id(text)
            if i is not None and i in self.special_token_ids:
                ids.add(i)
        if harmony:                         # whoever named it (a file's eot id included): it ends a message only
            ids.discard(self._tk.token_to_id(HARMONY_NOT_END))
        return frozenset(ids)

    def special_token_texts(self) -> dict[str, int]:
        """Special token text -> id (a stop string equal to one of these stops on that token)."""
        added = self._tk.get_added_tokens_decoder()
        return {added[i].content: i for i in sorted(self.special_token_ids)}

    def added_token_texts(self) -> dict[str, int]:
        """Text -> id of every added token (special or not, e.g. Qwen2.5's `<tool_call>`): one token each."""
        return {t.content: i for i, t in self._tk.get_added_tokens_decoder().items()}

    # ---- chat ---------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            **extra: Any) -> str:
        """The rendered chat prompt; encode it with add_special_tokens=False (see chat.py)."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template (e.g. a base model): use /v1/completions with "
                             "a plain prompt, or start the server with --chat-template FILE")
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **extra)

    def set_chat_template(self, template: str) -> None:
        """Replace (or supply, for a file without one) the chat template. ValueError if it does not compile."""
        self.chat_template = ChatTemplate(template, self._template_tokens)


def build_gguf_backend(meta: Mapping[str, Any]) -> tuple[_HFTokenizer, dict[str, Any]]:
    """(backend with its BOS/EOS post-processor, Tokenizer keyword arguments) from GGUF metadata."""
    kind = meta.get("tokenizer.ggml.model")
    if kind not in GGUF_BUILDERS:
        raise ValueError(f"GGUF tokenizer {kind!r} is not supported (supported: {', '.join(GGUF_BUILDERS)})")
    backend = GGUF_BUILDERS[kind](meta)
    bos, eos = token_text(meta, "bos_token_id"), token_text(meta, "eos_token_id")
    unk, pad = token_text(meta, "unknown_token_id"), token_text(meta, "padding_token_id")
    add_named_special_tokens(backend, [bos, eos, unk, pad])
    add_bos = meta.get("tokenizer.ggml.add_bos_token", kind == "llama")
    set_post_processor(backend, bos if add_bos else None,
                       eos if meta.get("tokenizer.ggml.add_eos_token", False) else None)
    # End-of-turn / end-of-message ids the file names besides eos (llama.cpp's eot/eom keys).
    extra_eos = [meta[k] for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
                 if isinstance(meta.get(k), int)]
    return backend, {"bos_token": bos, "eos_token": eos, "chat_template": meta.get("tokenizer.chat_template"),
                     "generation_eos": extra_eos,
                     "extra_template_tokens": {"unk_token": unk, "pad_token": pad}}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json writes special tokens as a string or as {"content": ...}."""
    if isinstance(value, Mapping):
        return value.get("content")
    return value if isinstance(value, str) else None
