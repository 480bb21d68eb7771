"""The dequantized-weight cache: a second load reads the cache, gives identical weights, and a bad
cache file is rebuilt rather than trusted."""
import torch

from haltwise.models import weight_cache
from haltwise.models.loader import load_model
from haltwise.models.tiny import tiny_llama
from tests.gguf.test_reader import VOCAB, write_gguf


def test_second_load_hits_the_cache_with_identical_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_gguf(tmp_path / "tiny.gguf", tiny_llama(VOCAB, seed=3))
    first = load_model(gguf, dtype="bfloat16").model
    cached = weight_cache.cache_file(gguf, "bfloat16")
    assert cached.is_file()
    loads = []
    monkeypatch.setattr(first.__class__, "load_weights", lambda self, w: loads.append(1))  # must not be called
    second = load_model(gguf, dtype="bfloat16").model
    assert not loads
    for (name, p), (_, q) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(p, q), name
    assert second.lm_head.weight is second.model.embed_tokens.weight


def test_corrupt_cache_is_rebuilt_and_key_follows_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_gguf(tmp_path / "tiny.gguf", tiny_llama(VOCAB, seed=4))
    reference = load_model(gguf).model
    cached = weight_cache.cache_file(gguf, "float32")
    cached.write_bytes(b"not a safetensors file")
    again = load_model(gguf).model
    assert all(torch.equal(p, q) for p, q in zip(reference.parameters(), again.parameters()))
    write_gguf(gguf, tiny_llama(VOCAB, seed=5))          # a changed file gets a new key
    assert weight_cache.cache_file(gguf, "float32") != cached


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    assert weight_cache.cache_file(write_gguf(tmp_path / "t.gguf", tiny_llama(VOCAB)), "float32") is None
