"""The tokenizer facade: the model's own vocabulary, from GGUF metadata or a Hugging Face directory.

Built on the `tokenizers` library. A GGUF byte-level BPE (`tokenizer.ggml.model = gpt2`) is rebuilt
the way transformers' GGUF loader does it: tokens spelled in the byte alphabet, the file's merges,
control tokens (type 3) added as special tokens, user-defined tokens (type 4) as plain added tokens,
the pre-tokenizer split chosen by `tokenizer.ggml.pre` (GPT-2's regex when the name is not one with
its own split, which includes SmolLM2's `smollm`), a ByteLevel decoder, and BOS/EOS added on encode
only when `tokenizer.ggml.add_bos_token` / `add_eos_token` say so.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as _HFTokenizer

from haltwise.tokenizer.byte_alphabet import CHAR_TO_BYTE, spell_bytes, token_string_to_bytes
from haltwise.tokenizer.chat import ChatTemplate
from haltwise.tokenizer.gguf_metadata import read_gguf_metadata

# Control tokens that end a turn or a document in common model families (SPEC §2's eos set).
END_OF_GENERATION_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>", "<end_of_turn>",
    "<|eom_id|>", "<|return|>",
)

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# `tokenizer.ggml.pre` -> split regex; any other name (gpt2, smollm, ...) uses GPT-2's ByteLevel regex.
PRE_TOKENIZER_SPLITS = {
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "falcon3": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT,
}
_CONTROL, _USER_DEFINED = 3, 4  # GGUF token_type values


class Tokenizer:
    """Encode, decode, special tokens, eos set and chat template of one model."""

    def __init__(self, backend: _HFTokenizer, *, bos_token: str | None, eos_token: str | None,
                 chat_template: str | None = None, generation_eos: Iterable[int] = (),
                 extra_template_tokens: Mapping[str, str | None] | None = None):
        """Prefer `from_gguf` / `from_hf_dir`. `backend` already carries its post-processor (BOS/EOS policy)."""
        self._tk = backend
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id: int | None = backend.token_to_id(bos_token) if bos_token else None
        self.eos_token_id: int | None = backend.token_to_id(eos_token) if eos_token else None
        self.generation_eos: tuple[int, ...] = tuple(int(i) for i in generation_eos)
        added = backend.get_added_tokens_decoder()
        # Exactly the ids that decode(skip_special_tokens=True) drops.
        self.special_token_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self.is_byte_level: bool = isinstance(backend.decoder, decoders.ByteLevel)
        self._token_bytes: list[bytes] | None = None  # filled on first use (byte-level only)
        template_tokens = {"bos_token": bos_token, "eos_token": eos_token, **(extra_template_tokens or {})}
        self.chat_template: ChatTemplate | None = (
            ChatTemplate(chat_template, template_tokens) if chat_template else None)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        """The tokenizer described by a GGUF file's metadata (byte-level BPE only)."""
        return cls.from_gguf_metadata(read_gguf_metadata(path))

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> "Tokenizer":
        """As from_gguf, from already-read metadata (lets the model loader read the file once)."""
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"GGUF tokenizer {kind!r} is not supported (only byte-level BPE, 'gpt2')")
        tokens: list[str] = meta["tokenizer.ggml.tokens"]
        types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        alphabet = CHAR_TO_BYTE.keys()
        spelled = [t if all(c in alphabet for c in t) else spell_bytes(t.encode("utf-8")) for t in tokens]
        vocab = {t: i for i, t in enumerate(spelled)}
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        backend = _HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        split = PRE_TOKENIZER_SPLITS.get(meta.get("tokenizer.ggml.pre", ""))
        if split is None:
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            backend.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        backend.decoder = decoders.ByteLevel()
        # A control token spelled outside the byte alphabet is a mislabel; transformers skips it too.
        backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                    for t, ty in zip(tokens, types) if ty == _CONTROL and t in vocab])
        backend.add_tokens([AddedToken(t, normalized=False, special=False)
                            for t, ty in zip(tokens, types) if ty == _USER_DEFINED and t in vocab])

        def token(key: str) -> str | None:
            i = meta.get(f"tokenizer.ggml.{key}")
            return tokens[i] if i is not None and 0 <= i < len(tokens) else None

        bos, eos = token("bos_token_id"), token("eos_token_id")
        _set_post_processor(backend, bos if meta.get("tokenizer.ggml.add_bos_token", False) else None,
                            eos if meta.get("tokenizer.ggml.add_eos_token", False) else None)
        return cls(backend, bos_token=bos, eos_token=eos, chat_template=meta.get("tokenizer.chat_template"),
                   extra_template_tokens={"unk_token": token("unknown_token_id"),
                                          "pad_token": token("padding_token_id")})

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
        return self._tk.encode(text, add_special_tokens=add_special_tokens).ids

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
        return self._tk.to_str()

    def eos_token_ids(self, generation_eos: Iterable[int] = ()) -> frozenset[int]:
        """SPEC §2 eos set: tokenizer eos | generation-config eos | end-of-generation control tokens."""
        ids = {int(i) for i in (*self.generation_eos, *generation_eos)}
        if self.eos_token_id is not None:
            ids.add(self.eos_token_id)
        for text in END_OF_GENERATION_TOKENS:
            i = self._tk.token_to_id(text)
            if i is not None and i in self.special_token_ids:
                ids.add(i)
        return frozenset(ids)

    def special_token_texts(self) -> dict[str, int]:
        """Special token text -> id (a stop string equal to one of these stops on that token)."""
        added = self._tk.get_added_tokens_decoder()
        return {added[i].content: i for i in sorted(self.special_token_ids)}

    # ---- chat ---------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            **extra: Any) -> str:
        """The rendered chat prompt; encode it with add_special_tokens=False (see chat.py)."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template; use the completions endpoint")
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **extra)


def _set_post_processor(backend: _HFTokenizer, bos: str | None, eos: str | None) -> None:
    """Add BOS/EOS around a single sequence (and each of a pair) on encode(add_special_tokens=True)."""
    pre = [bos] if bos else []
    post = [eos] if eos else []
    single = " ".join([*pre, "$A:0", *post])
    pair = " ".join([*pre, "$A:0", *post, *pre, "$B:1", *post])
    specials = [(t, backend.token_to_id(t)) for t in dict.fromkeys(pre + post)]
    backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json writes special tokens as a string or as {"content": ...}."""
    if isinstance(value, Mapping):
        return value.get("content")
    return value if isinstance(value, str) else None
