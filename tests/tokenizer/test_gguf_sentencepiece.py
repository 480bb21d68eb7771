"""SentencePiece (and other BPE pre-tokenizer) GGUFs, written tiny, against transformers loading the same file."""
from __future__ import annotations

import pytest

from haltwise.tokenizer.gguf_sentencepiece import rebuild_merges
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tiny_gguf import byte_level_gguf, sentencepiece_gguf
from tests.tokenizer.tokenizer_samples import MIXED_TEXT, SENTENCEPIECE_TEXTS

TEXTS = [MIXED_TEXT, *MIXED_TEXT.splitlines(keepends=True), *SENTENCEPIECE_TEXTS]

CASES = {
    "gemma3-sentencepiece": lambda p: sentencepiece_gguf(p, "gemma3"),
    "llama-sentencepiece": lambda p: sentencepiece_gguf(p, "llama"),
    "llama-bpe": lambda p: byte_level_gguf(p, "llama-bpe", "llama"),
    "qwen2-bpe": lambda p: byte_level_gguf(p, "qwen2", "qwen2"),
    "gpt2-default": lambda p: byte_level_gguf(p, "gpt2", "llama"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    from transformers import AutoTokenizer

    path = CASES[request.param](tmp_path_factory.mktemp("gguf") / "tok.gguf")
    return Tokenizer.from_gguf(path), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def test_encode_equals_transformers(pair):
    ours, hf = pair
    for text in TEXTS:
        assert ours.encode(text) == hf.encode(text), text
        assert ours.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False), text


def test_decode_equals_transformers(pair):
    ours, hf = pair
    for text in TEXTS:
        ids = ours.encode(text)
        for skip in (True, False):
            assert ours.decode(ids, skip) == hf.decode(ids, skip_special_tokens=skip), text
            for cut in (ids[1:], ids[:-1], ids[2:5], ids[::3]):
                assert ours.decode(cut, skip) == hf.decode(cut, skip_special_tokens=skip), (text, cut)


def test_special_tokens_are_those_transformers_skips(pair):
    ours, hf = pair
    for i in range(ours.vocab_size):
        kept = hf.decode([i], skip_special_tokens=True)
        assert (i in ours.special_token_ids) == (kept == "" and hf.decode([i], skip_special_tokens=False) != ""), i


def test_llama_sentencepiece_prefix_space(tmp_path):
    tok = Tokenizer.from_gguf(sentencepiece_gguf(tmp_path / "l.gguf", "llama"))
    first = tok.id_to_token(tok.encode("the", add_special_tokens=False)[0])
    assert first.startswith("\u2581")  # Metaspace prepends ▁ to the first word ...
    assert tok.decode(tok.encode("the cat")) == "the cat"  # ... and the decoder strips it again
    assert tok.encode("x")[0] == tok.bos_token_id == 1


def test_rebuild_merges_order():
    vocab = {"a": 0, "b": 1, "ab": 2, "abb": 3, "bb": 4}
    # ranked by the merged piece (higher first); within "abb", the longer left part first
    assert rebuild_merges(vocab, {"ab": 3.0, "abb": 2.0, "bb": 1.0}) == [("a", "b"), ("ab", "b"), ("a", "bb"),
                                                                       ("b", "b")]
