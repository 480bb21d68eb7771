"""Unique keys (structured/unique_keys.py): under a JSON grammar no object gets a key it already holds."""
from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.structured.bitmask import allowed_token_ids, bitmask_width
from haltwise.structured.spec import StructuredOutputs
from haltwise.structured.unique_keys import KeyIndex, UniqueKeys
from tests.structured.grammar_walk import random_walk


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


def _allowed_after(backend, tok, text: str, spec: StructuredOutputs) -> list[str]:
    matcher = backend.compile(spec).new_matcher()
    for t in tok.encode(text, add_special_tokens=False):
        assert matcher.consume(t), text
    bits = torch.zeros(1, bitmask_width(tok.vocab_size), dtype=torch.int32)
    backend.fill_bitmask([matcher], bits)
    return [tok.decode([i]) for i in allowed_token_ids(bits[0], tok.vocab_size)]


@pytest.mark.parametrize("spec", [StructuredOutputs(json_object=True),
                                  StructuredOutputs(json={"type": "object", "additionalProperties": True})])
def test_a_held_key_cannot_be_finished_again(smol_backend, smol_tok, spec) -> None:
    """SmolLM2's loop `"population": 1, "population` can go on ("population_density") but not close."""
    inside = _allowed_after(smol_backend, smol_tok, '{\n  "name": "Paris",\n  "population": 1,\n  "population', spec)
    assert inside and not any(t.startswith('"') for t in inside), [t for t in inside if t.startswith('"')]
    assert any(t.startswith("_") for t in inside)
    fresh = _allowed_after(smol_backend, smol_tok, '{\n  "name": "Paris",\n  "populat', spec)
    assert any(t.startswith('"') for t in fresh)                     # a key not held closes as usual


def test_nested_objects_hold_their_own_keys(smol_backend, smol_tok) -> None:
    so = StructuredOutputs(json_object=True)
    inner = _allowed_after(smol_backend, smol_tok, '{"name": "Paris", "capital": {"name', so)
    assert any(t.startswith('"') for t in inner)                     # "name" is held by the outer object only
    after = _allowed_after(smol_backend, smol_tok, '{"name": "Paris", "capital": {"x": 1}, "name', so)
    assert not any(t.startswith('"') for t in after)                 # back in the outer object: held
    arr = _allowed_after(smol_backend, smol_tok, '{"items": [{"name": 1}, {"name', so)
    assert any(t.startswith('"') for t in arr)                       # each array element is its own object


def test_rollback_forgets_the_keys_of_the_dropped_tokens(smol_backend, smol_tok) -> None:
    """Rolled back over '": 2, "name', the mask is that of a matcher that never saw them ("name" not held)."""
    so = StructuredOutputs(json_object=True)
    ids = smol_tok.encode('{"city": 1, "name', add_special_tokens=False)
    extra = smol_tok.encode('": 2, "name', add_special_tokens=False)
    rolled, fresh = smol_backend.compile(so).new_matcher(), smol_backend.compile(so).new_matcher()
    assert all(rolled.consume(t) for t in ids + extra) and rolled.rollback(len(extra))
    assert all(fresh.consume(t) for t in ids)
    bits = torch.zeros(2, bitmask_width(smol_tok.vocab_size), dtype=torch.int32)
    smol_backend.fill_bitmask([rolled, fresh], bits)
    assert torch.equal(bits[0], bits[1])
    assert any(smol_tok.decode([i]).startswith('"') for i in allowed_token_ids(bits[0], smol_tok.vocab_size))


def test_the_grammar_keeps_the_last_word() -> None:
    """A row whose only legal tokens would repeat a key is left as the grammar made it (never empty)."""
    vocab = [b'{', b'"a"', b'"', b'a', b':1', b',', b'}']
    guard = UniqueKeys(KeyIndex(vocab), vocab)
    for t in (0, 1, 4, 5):            # {"a":1,
        guard.feed(t)
    row = torch.tensor([1 << 1], dtype=torch.int32)   # only '"a"' allowed
    guard.trim(row)
    assert int(row[0]) == 1 << 1
    row = torch.tensor([(1 << 1) | (1 << 2)], dtype=torch.int32)
    guard.trim(row)
    assert int(row[0]) == 1 << 2      # '"a"' removed, '"' kept


AB_KEYS = {"type": "object", "additionalProperties": False,      # keys a, b, a_x, b_x_x, ...
           "patternProperties": {"^[ab](_x)*$": {"type": "integer", "minimum": 0, "maximum": 9}}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31))
def test_random_objects_never_repeat_a_key(tiny_backend, tiny_tok, seed: int) -> None:
    """Keys a, b, a_x, ... under random logits: without the guard walks repeat one ("b_x", "b", "b")."""
    grammar = tiny_backend.compile(StructuredOutputs(json=AB_KEYS))
    ids, done = random_walk(tiny_backend, grammar, tiny_tok.vocab_size, seed, max_steps=400)
    if done:
        json.loads(tiny_tok.decode(ids), object_pairs_hook=_no_duplicate_keys)
