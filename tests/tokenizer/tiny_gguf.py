"""Tiny tokenizer-only GGUF files written with gguf.GGUFWriter, for fast live checks against transformers.

- sentencepiece_gguf: `tokenizer.ggml.model = llama` (Gemma flavour for architecture gemma3, Llama/Mistral
  flavour for llama): <0xNN> byte pieces, "▁"-spelled pieces learned in-process from a fixed text,
  control and user-defined tokens, scores, no merges (as real SentencePiece GGUFs).
- byte_level_gguf: `tokenizer.ggml.model = gpt2` with a chosen `tokenizer.ggml.pre`, merges learned in-process.
"""
from __future__ import annotations

import json
from pathlib import Path

import gguf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from haltwise.tokenizer.tiny import _CORPUS

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
SPACE = "\u2581"


def _learned(pre_tokenizer, vocab_size: int) -> Tokenizer:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if isinstance(pre_tokenizer, pre_tokenizers.ByteLevel) else []
    tk.train_from_iterator(_CORPUS.splitlines(keepends=True) * 4, trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False, initial_alphabet=alphabet))
    return tk


def _writer(path: Path, arch: str) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(256)
    return w


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sentencepiece_gguf(path: Path, arch: str = "gemma3", chat_template: str | None = None) -> Path:
    gemma = arch.startswith("gemma")
    learned = _learned(pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first" if not gemma else "never"),
                       400)
    pieces = [p for p, _ in sorted(learned.get_vocab().items(), key=lambda kv: kv[1]) if not p.startswith("<0x")]
    head = (["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"] if gemma
            else ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"])
    user = ["\n", "\n\n", "  ", "   ", "<table>"] if gemma else ["<user_tok>"]
    tokens = head + user + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = ([CONTROL] * len(head) + [USER_DEFINED] * len(user) + [BYTE] * 256 + [NORMAL] * len(pieces))
    if not gemma:
        types[0] = 2  # UNKNOWN
    w = _writer(path, arch)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_bos_token_id(2 if gemma else 1)
    w.add_eos_token_id(1 if gemma else 2)
    w.add_unk_token_id(3 if gemma else 0)
    if gemma:
        w.add_pad_token_id(0)
        w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    if chat_template:
        w.add_chat_template(chat_template)
    _finish(w)
    return path


def byte_level_gguf(path: Path, pre: str = "llama-bpe", arch: str = "llama") -> Path:
    learned = _learned(pre_tokenizers.ByteLevel(add_prefix_space=False), 500)
    vocab = sorted(learned.get_vocab().items(), key=lambda kv: kv[1])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tokens = [t for t, _ in vocab] + specials + ["<think>"]
    types = [NORMAL] * len(vocab) + [CONTROL] * len(specials) + [USER_DEFINED]
    merges = [" ".join(m) for m in json.loads(learned.to_str())["model"]["merges"]]
    w = _writer(path, arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(vocab))
    w.add_eos_token_id(len(vocab) + 1)
    w.add_add_bos_token(True)
    _finish(w)
    return path
