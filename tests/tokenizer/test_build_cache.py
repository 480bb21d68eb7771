"""The tokenizer build cache: a hit equals a fresh build (a BPE split into marshalled vocabulary and merges
rebuilds the same tokenizer, or is stored whole); a changed file, a bad entry or the off switch rebuilds."""
from __future__ import annotations

import json
import os

import pytest

from haltwise.tokenizer import build_cache
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tiny_gguf import byte_level_gguf, sentencepiece_gguf
from tests.tokenizer.tokenizer_samples import MIXED_TEXT


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build_cache, "MIN_CACHED_VOCAB", 0)  # cache even a tiny rebuilt vocabulary
    return tmp_path / "cache" / "tokenizers"


def _same(a: Tokenizer, b: Tokenizer) -> None:
    ids = a.encode(MIXED_TEXT)
    assert ids == b.encode(MIXED_TEXT) and a.decode(ids) == b.decode(ids)
    assert (a.bos_token_id, a.eos_token_id, a.special_token_ids) == (b.bos_token_id, b.eos_token_id,
                                                                      b.special_token_ids)
    assert a.eos_token_ids() == b.eos_token_ids()
    assert (a.chat_template and a.chat_template.source) == (b.chat_template and b.chat_template.source)


@pytest.mark.parametrize("kind", ["sentencepiece", "byte-level"])
def test_second_build_is_a_cache_hit_equal_to_the_first(cache_dir, tmp_path, kind):
    path = (sentencepiece_gguf(tmp_path / "g.gguf", "gemma3", chat_template="{{ messages[0]['content'] }}")
            if kind == "sentencepiece" else byte_level_gguf(tmp_path / "b.gguf"))
    first = Tokenizer.from_gguf(path)
    second = Tokenizer.from_gguf(path)
    assert (first.build_source, second.build_source) == ("built", "cache")
    _same(first, second)
    assert json.loads(first.backend_json()) == json.loads(second.backend_json())
    whole = 1 if kind == "sentencepiece" else 0   # kept beside a BPE the native encoder encodes (spm_native.py)
    assert [len(list(cache_dir.glob(f"*{suffix}"))) for suffix in (".bpe.marshal", ".pipeline.json",
                                                                    ".tokenizer.json")] == [1, 1, whole]


def test_a_tokenizer_the_split_cannot_rebuild_exactly_is_stored_whole(cache_dir, tmp_path):
    built = Tokenizer.from_gguf(sentencepiece_gguf(tmp_path / "g.gguf", "gemma3"))
    backend = build_cache._HFTokenizer.from_str(built.backend_json())
    backend.enable_truncation(8)                   # not carried by the split: it would come back without it
    build_cache.store("whole", backend, {})
    assert sorted(p.name for p in cache_dir.glob("whole.*")) == ["whole.facts.json", "whole.tokenizer.json"]
    again = build_cache.load("whole").backend
    assert again.to_str() == backend.to_str()


def test_changed_file_is_rebuilt(cache_dir, tmp_path):
    path = sentencepiece_gguf(tmp_path / "g.gguf", "gemma3")
    Tokenizer.from_gguf(path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert Tokenizer.from_gguf(path).build_source == "built"


def test_unreadable_entry_is_rebuilt(cache_dir, tmp_path, caplog):
    path = sentencepiece_gguf(tmp_path / "g.gguf", "gemma3")
    built = Tokenizer.from_gguf(path)
    (entry,) = cache_dir.glob("*.bpe.marshal")
    entry.write_bytes(b"not marshal")
    again = Tokenizer.from_gguf(path)
    assert again.build_source == "built" and "ignoring tokenizer cache entry" in caplog.text
    _same(built, again)


def test_cache_can_be_turned_off(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_TOKENIZER_CACHE", "0")
    path = sentencepiece_gguf(tmp_path / "g.gguf", "gemma3")
    assert [Tokenizer.from_gguf(path).build_source for _ in range(2)] == ["built", "built"]
    assert not cache_dir.exists()


def test_fast_builds_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    Tokenizer.from_gguf(sentencepiece_gguf(tmp_path / "g.gguf", "gemma3"))  # under MIN_CACHED_VOCAB
    Tokenizer.from_gguf(byte_level_gguf(tmp_path / "b.gguf"))              # likewise
    assert not (tmp_path / "cache" / "tokenizers").exists()
