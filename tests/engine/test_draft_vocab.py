"""A draft model must share the target's vocabulary id for id (engine/draft_vocab.py, draft_build.py)."""
from __future__ import annotations

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.draft_build import DraftModelError, attach_draft, resolve_draft
from haltwise.engine.draft_vocab import vocabulary_mismatch
from haltwise.models import catalog
from haltwise.models.tiny import tiny_llama
from haltwise.tokenizer.tiny import tiny_tokenizer


def test_the_same_vocabulary_matches_and_any_difference_is_named():
    target = tiny_tokenizer()
    assert vocabulary_mismatch(target, tiny_tokenizer()) == ""
    assert "tokens where the target has" in vocabulary_mismatch(target, tiny_tokenizer(added_tokens=("<x>",)))


def test_a_token_at_another_id_is_a_mismatch(monkeypatch):
    target, draft = tiny_tokenizer(), tiny_tokenizer()
    swapped = {300: draft.id_to_token(301), 301: draft.id_to_token(300)}
    original = draft.id_to_token
    monkeypatch.setattr(draft, "id_to_token", lambda i: swapped.get(i, original(i)))
    assert vocabulary_mismatch(target, draft).startswith("token 300 is")


def test_attach_refuses_a_draft_with_another_vocabulary():
    target = tiny_tokenizer()
    config = EngineConfig(dtype="auto", kv_cache_memory=2**20)
    other = tiny_tokenizer(added_tokens=("<think>", "</think>"))
    net = tiny_llama(other.vocab_size)
    with pytest.raises(DraftModelError, match="vocabulary differs"):
        attach_draft(net, net.config, other, "other", config, target, net.config, 256)
    draft = attach_draft(net, net.config, target, "same", config, target, net.config, 256)
    assert draft.blocks.num_free_blocks == draft.blocks.num_blocks > 0


def test_which_draft_model_is_loaded(monkeypatch):
    assert resolve_draft(None, "qwen2.5-coder-1.5b") is None
    assert resolve_draft("none", "qwen2.5-coder-1.5b") is None
    assert resolve_draft("some/draft.gguf", None) == "some/draft.gguf"
    monkeypatch.setattr(catalog, "is_installed", lambda name: True)
    assert resolve_draft("auto", "qwen2.5-coder-1.5b") == "qwen2.5-coder-0.5b"
    assert resolve_draft("auto", None) is None and resolve_draft("auto", "/x/model.gguf") is None
    monkeypatch.setattr(catalog, "is_installed", lambda name: False)
    assert resolve_draft("auto", "qwen2.5-coder-1.5b") is None
