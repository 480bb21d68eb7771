"""The llguidance backend on real vocabularies: validation, caching, masks, and what completes."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.structured.spec import StructuredOutputs, StructureError
from tests.structured.grammar_walk import random_walk
from tests.structured.invalid_corpus import INVALID_GRAMMARS, INVALID_REGEXES, INVALID_SCHEMAS

import torch

from haltwise.structured.bitmask import allowed_token_ids, bitmask_width


def _first_tokens(backend, tok, spec: StructuredOutputs) -> list[str]:
    matcher = backend.compile(spec).new_matcher()
    bits = torch.zeros(1, bitmask_width(tok.vocab_size), dtype=torch.int32)
    backend.fill_bitmask([matcher], bits)
    return [tok.decode([i], skip_special_tokens=False) for i in allowed_token_ids(bits[0], tok.vocab_size)]


@pytest.mark.parametrize("schema, why", INVALID_SCHEMAS, ids=[w for _, w in INVALID_SCHEMAS])
def test_invalid_schemas_are_refused_with_param(tiny_backend, schema, why) -> None:
    with pytest.raises(StructureError) as info:
        tiny_backend.compile(StructuredOutputs(json=schema, param="response_format.json_schema.schema"))
    assert info.value.param == "response_format.json_schema.schema" and str(info.value)


@pytest.mark.parametrize("regex", INVALID_REGEXES)
def test_invalid_regexes_are_refused(tiny_backend, regex: str) -> None:
    with pytest.raises(StructureError) as info:
        tiny_backend.compile(StructuredOutputs(regex=regex, param="structured_outputs.regex"))
    assert info.value.param == "structured_outputs.regex"


@pytest.mark.parametrize("grammar", INVALID_GRAMMARS)
def test_invalid_grammars_are_refused(tiny_backend, grammar: str) -> None:
    with pytest.raises(StructureError):
        tiny_backend.compile(StructuredOutputs(grammar=grammar, param="guided_grammar"))


def test_unknown_keywords_are_refused_not_ignored(tiny_backend) -> None:
    """llguidance alone accepts {"maxLenght": 3} (an annotation to JSON Schema); we must not."""
    with pytest.raises(StructureError, match="maxLenght"):
        tiny_backend.compile(StructuredOutputs(json={"type": "string", "maxLenght": 3}))
    tiny_backend.compile(StructuredOutputs(json={"type": "string", "maxLength": 3, "title": "t", "description": "d"}))


def test_compiled_grammars_are_cached_by_constraint(tiny_backend) -> None:
    a = tiny_backend.compile(StructuredOutputs(regex="ab+c", param="x"))
    b = tiny_backend.compile(StructuredOutputs(regex="ab+c", param="y"))
    assert a._prototype is b._prototype                   # one compile for the same constraint
    assert tiny_backend.compile(StructuredOutputs(regex="ab+d"))._prototype is not a._prototype


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_json_object_first_token_can_only_open_an_object(request, which: str) -> None:
    backend, tok = request.getfixturevalue(f"{which}_backend"), request.getfixturevalue(f"{which}_tok")
    first = _first_tokens(backend, tok, StructuredOutputs(json_object=True))
    assert first and all(t.startswith("{") for t in first), first


def test_whitespace_inside_json_is_bounded(smol_backend, smol_tok) -> None:
    """After {"a": only bounded whitespace may follow: one space, or a newline and <= 16 spaces or <= 4 tabs."""
    matcher = smol_backend.compile(StructuredOutputs(json_object=True)).new_matcher()
    for t in smol_tok.encode('{"a":', add_special_tokens=False):
        assert matcher.consume(t)
    bits = torch.zeros(1, bitmask_width(smol_tok.vocab_size), dtype=torch.int32)
    smol_backend.fill_bitmask([matcher], bits)
    texts = [smol_tok.decode([i]) for i in allowed_token_ids(bits[0], smol_tok.vocab_size)]
    blank = [t for t in texts if t and not t.strip()]
    assert blank and all(re.fullmatch(r"( |\n {0,16}|\n\t{0,4})", t) for t in blank), blank


@pytest.mark.parametrize("text, default, flexible", [
    ('{"a": 1}', True, True),
    ('{\n  "a": {\n    "b": 1\n  }\n}', True, True),
    ('{\n\t"a": 1\n}', True, True),
    ('{\n    \t  \t  "a": 1}', False, True),          # the tab/space run
    ('{"a":\n\n 1}', False, True),                   # a blank line
    ('{"a":' + " " * 30 + "1}", False, True),
])
def test_the_default_whitespace_rule_and_the_opt_out(smol_backend, smol_tok, text, default, flexible) -> None:
    for pattern, expect in ((None, default), (r"[ \t\n\r]*", flexible)):
        m = smol_backend.compile(StructuredOutputs(json_object=True, whitespace_pattern=pattern)).new_matcher()
        ok = all(m.consume(t) for t in smol_tok.encode(text, add_special_tokens=False))
        assert (ok and m.is_complete) == expect, (text, pattern)


# ---- random schemas x random logits: every completed walk parses and validates -----------------------------
leaf = st.one_of(
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-1000, 1000), st.integers(0, 5000)),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 8)),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.one_of(st.integers(-5, 5), st.text("abc", max_size=3)), min_size=1, max_size=4, unique=True)
      .map(lambda xs: {"enum": xs}),
)
schemas = st.recursive(leaf, lambda inner: st.one_of(
    st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, inner, st.integers(0, 3)),
    st.dictionaries(st.text("xyz", min_size=1, max_size=3), inner, min_size=1, max_size=3).flatmap(
        lambda props: st.builds(lambda req, extra: {"type": "object", "properties": props,
                                                     "required": sorted(req), "additionalProperties": extra},
                                st.sets(st.sampled_from(sorted(props))), st.just(False))),
    st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
), max_leaves=6)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, seed=st.integers(0, 2**31))
def test_random_schema_random_logits_every_completion_validates(tiny_backend, tiny_tok, schema, seed) -> None:
    grammar = tiny_backend.compile(StructuredOutputs(json=schema))
    ids, done = random_walk(tiny_backend, grammar, tiny_tok.vocab_size, seed)
    if done:
        text = tiny_tok.decode(ids)          # the end token (if it closed the structure) decodes to ""
        jsonschema.validate(json.loads(text), schema)


def test_random_walks_mostly_complete(tiny_backend, tiny_tok) -> None:
    """The property above is not vacuous: bounded schemas complete under random logits."""
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "b": {"type": "string", "maxLength": 4}},
              "required": ["a", "b"], "additionalProperties": False}
    grammar = tiny_backend.compile(StructuredOutputs(json=schema))
    done = 0
    for seed in range(20):
        ids, ok = random_walk(tiny_backend, grammar, tiny_tok.vocab_size, seed)
        if ok:
            jsonschema.validate(json.loads(tiny_tok.decode(ids)), schema)
            done += 1
    assert done >= 15


def test_smollm2_vocabulary_random_walk_validates(smol_backend, smol_tok) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                               "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
              "required": ["name", "age", "tags"], "additionalProperties": False}
    grammar = smol_backend.compile(StructuredOutputs(json=schema))
    done = 0
    for seed in range(10):
        ids, ok = random_walk(smol_backend, grammar, smol_tok.vocab_size, seed, max_steps=120)
        if ok:
            jsonschema.validate(json.loads(smol_tok.decode(ids)), schema)
            done += 1
    assert done >= 5


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), case=st.sampled_from([r"[0-9]{2,4}-[a-z]{1,5}", r"(yes|no)!", r"a(b|cd)*e"]))
def test_regex_completions_fullmatch(tiny_backend, tiny_tok, seed: int, case: str) -> None:
    grammar = tiny_backend.compile(StructuredOutputs(regex=case))
    ids, done = random_walk(tiny_backend, grammar, tiny_tok.vocab_size, seed)
    if done:
        assert re.fullmatch(case, tiny_tok.decode(ids))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31),
       choices=st.lists(st.text("ab \"\n\u00e9", min_size=1, max_size=5), min_size=1, max_size=4, unique=True))
def test_choice_completions_are_one_of_the_choices(tiny_backend, tiny_tok, seed: int, choices: list[str]) -> None:
    grammar = tiny_backend.compile(StructuredOutputs(choice=tuple(choices)))
    ids, done = random_walk(tiny_backend, grammar, tiny_tok.vocab_size, seed)
    assert done
    assert tiny_tok.decode(ids) in choices
