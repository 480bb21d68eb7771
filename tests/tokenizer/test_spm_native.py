"""The native SentencePiece-BPE encoder (spm_native.py, csrc/spm_bpe.cpp) encodes exactly as `tokenizers`
with the rebuilt merges: on the real Gemma 3 vocabulary and on tiny Gemma-style GGUFs; a vocabulary it
cannot encode exactly (Llama-style, merges ranked by score) keeps `tokenizers`."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as _HFTokenizer

from haltwise.kernels.native import build as native_build
from haltwise.tokenizer import build_cache
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tiny_gguf import sentencepiece_gguf
from tests.tokenizer.tokenizer_samples import LONGTEXT, MIXED_TEXT, SENTENCEPIECE_TEXTS

TEXTS = [MIXED_TEXT, *MIXED_TEXT.splitlines(keepends=True), *SENTENCEPIECE_TEXTS]

pytestmark = pytest.mark.skipif(native_build.load() is None,
                                reason="no native extension (no compiler): tokenizers encodes")

# Characters that exercise the encoder's rules: spaces and their "▁", byte fallback (controls, emoji, rare
# CJK), special-token text and its pieces, and text that spells a byte piece.
PIECES = [" ", "  ", "\n", "\t", "\u2581", "a", "the", "ing", "é", "中", "𓀀", "🙂", "\u0007", "<", ">", "_", "0",
          "<start_of_turn>", "<end_of_turn>", "<bos>", "<pad>", "<0x0A>", "user", "model", "<unused3>", "<table>"]


@pytest.fixture(scope="module")
def gemma_pair(gemma):
    """(our Gemma tokenizer read from the build cache, a `tokenizers` backend with the merges, from its JSON)."""
    ours = Tokenizer.from_gguf(_gemma_path())    # the session's `gemma` built (and stored) it at the latest
    assert ours.build_source == "cache" and ours._native is not None, "the cached Gemma tokenizer should encode natively"
    return ours, _HFTokenizer.from_str(ours.backend_json())


def _gemma_path():
    from haltwise.models.catalog import resolve_model

    return resolve_model("gemma3-270m", progress=None)


def _reference_ids(backend: _HFTokenizer, text: str, add_special_tokens: bool = True) -> list[int]:
    return backend.encode(text, add_special_tokens=add_special_tokens).ids


def test_gemma_long_texts_and_samples_encode_as_tokenizers(gemma_pair):
    ours, reference = gemma_pair
    with open(LONGTEXT, encoding="utf-8") as f:
        long_text = f.read()[:200_000]
    for text in (long_text, *TEXTS):
        assert ours.encode(text) == _reference_ids(reference, text), text[:60]
        assert ours.encode(text, add_special_tokens=False) == _reference_ids(reference, text, False), text[:60]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=40))
def test_gemma_generated_texts_encode_as_tokenizers(gemma_pair, parts):
    ours, reference = gemma_pair
    text = "".join(parts)
    assert ours.encode(text) == _reference_ids(reference, text)
    reference.encode_special_tokens = True
    try:
        assert ours.encode_as_text(text) == _reference_ids(reference, text, False)
    finally:
        reference.encode_special_tokens = False


def test_gemma_backend_json_keeps_the_merges(gemma_pair):
    ours, reference = gemma_pair
    spec = json.loads(ours.backend_json())
    assert len(spec["model"]["merges"]) > 500_000
    assert ours._tk.get_vocab_size() == reference.get_vocab_size()   # decoding and ids need no merges
    ids = ours.encode(MIXED_TEXT)
    assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True)


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build_cache, "MIN_CACHED_VOCAB", 0)
    return tmp_path / "cache" / "tokenizers"


@pytest.mark.parametrize("arch, native", [("gemma3", True), ("llama", False)])
def test_a_cached_tiny_vocabulary_encodes_natively_only_when_exact(cache_dir, tmp_path, arch, native):
    path = sentencepiece_gguf(tmp_path / "t.gguf", arch)
    built, cached = Tokenizer.from_gguf(path), Tokenizer.from_gguf(path)
    assert (built.build_source, cached.build_source) == ("built", "cache")
    assert (cached._native is not None) == native
    for text in TEXTS:
        assert cached.encode(text) == built.encode(text), text
        assert cached.encode_as_text(text) == built.encode_as_text(text), text
    assert json.loads(cached.backend_json()) == json.loads(built.backend_json())


def test_a_native_entry_whose_whole_json_went_missing_still_answers_backend_json(cache_dir, tmp_path):
    path = sentencepiece_gguf(tmp_path / "t.gguf", "gemma3")
    built = Tokenizer.from_gguf(path)
    cached = Tokenizer.from_gguf(path)
    (whole,) = cache_dir.glob("*.tokenizer.json")
    whole.unlink()
    assert json.loads(cached.backend_json()) == json.loads(built.backend_json())
    assert Tokenizer.from_gguf(path)._native is None   # without it, the next start encodes with tokenizers


def test_reading_a_native_entry_never_compiles_the_extension(cache_dir, tmp_path):
    """Without a built extension (a new build key after an upgrade), a tokenizer-only tool encodes with
    `tokenizers` rather than wait for the compiler."""
    import os
    import subprocess
    import sys

    path = sentencepiece_gguf(tmp_path / "t.gguf", "gemma3")
    built = Tokenizer.from_gguf(path)
    assert Tokenizer.from_gguf(path)._native is not None
    kernels = tmp_path / "kernels"
    code = ("import sys; from haltwise.tokenizer.tokenizer import Tokenizer; t = Tokenizer.from_gguf(sys.argv[1]); "
            "print(t.build_source, t._native is None, t.encode(sys.argv[2]))")
    env = dict(os.environ, HALTWISE_KERNEL_CACHE=str(kernels))
    out = subprocess.run([sys.executable, "-c", code, str(path), MIXED_TEXT], env=env, capture_output=True,
                         text=True, check=True).stdout.split(" ", 2)
    assert out[:2] == ["cache", "True"] and out[2].strip() == str(built.encode(MIXED_TEXT))
    assert not kernels.exists() or not any(kernels.iterdir())
