"""The closer: from any valid JSON prefix, the grammar's completion parses and validates; path and ideal close."""
from __future__ import annotations

import json

import jsonschema
import pytest

from haltwise.structured.closing import ideal_close, json_path
from haltwise.structured.spec import StructuredOutputs

SCHEMA = {"type": "object", "properties": {
    "description": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    "age": {"type": "integer"}}, "required": ["description", "tags", "age"]}


@pytest.mark.parametrize("text, path, close", [
    ('{"description": "The sky is deep, deep', "$.description", '"}'),
    ('{"a": [1, 2, {"b": ["x", "y', "$.a[2].b[1]", '"]}]}'),
    ('{"a b": {"c": 1', '$["a b"].c', "}}"),
    ('<tool_call>\n{"name": "f", "arguments": {"q": "x\\"', "$.arguments.q", '"}}'),
    ('{"k": "a,b}"', "$.k", "}"),
])
def test_json_path_and_ideal_close(text: str, path: str, close: str) -> None:
    assert json_path(text) == path and ideal_close(text) == close


@pytest.mark.parametrize("prefix", [
    '{"description": "The sky is a deep, deep, deep',          # required keys and a minItems array still missing
    '{"description": "x", "tags": ["a", "b',
    '{"description": "x", "tags": [',
    '{"description": "x", "tags": ["a", "b"], "age": 12',
])
def test_the_closer_completes_any_prefix_into_json_that_validates(smol_backend, smol_tok, prefix: str) -> None:
    grammar = smol_backend.compile(StructuredOutputs(json=SCHEMA))
    m = grammar.new_matcher()
    assert all(m.consume(t) for t in smol_tok.encode(prefix, add_special_tokens=False))
    ids = m.close(prefix)
    assert ids is not None and m.is_complete
    value = json.loads(prefix + smol_tok.decode(ids))
    jsonschema.validate(value, SCHEMA)
    again = grammar.new_matcher()          # deterministic: the same prefix closes the same way
    for t in smol_tok.encode(prefix, add_special_tokens=False):
        again.consume(t)
    assert again.close(prefix) == ids


def test_a_closer_that_cannot_finish_leaves_the_matcher_untouched(smol_backend, smol_tok) -> None:
    grammar = smol_backend.compile(StructuredOutputs(regex="[a-z]{400}"))   # > MAX_CLOSING_TOKENS tokens
    m = grammar.new_matcher()
    assert m.close("") is None and not m.is_complete
    assert m.consume(smol_tok.encode("a", add_special_tokens=False)[0])
