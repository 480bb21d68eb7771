"""Llama 3.x JSON in tool_choice auto: a bare `{"name": ..., "parameters": ...}` as the answer's first
characters is a call (as in llama.cpp's Llama 3.x handler), later in the answer it is text; the grammar and
the streaming parser agree on that, and every call the grammar lets through validates."""
from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from hypothesis import given, settings, strategies as st

from haltwise.structured.bitmask import GrammarMask, apply_bitmask, bitmask_width
from haltwise.structured.llguidance_backend import LLGuidanceBackend
from haltwise.tokenizer.tiny import tiny_tokenizer
from haltwise.toolcalls.formats import FORMATS
from haltwise.toolcalls.parser import Content, parse
from haltwise.toolcalls.plan import plan_tool_calls
from haltwise.toolcalls.spec import parse_tool_request
from tests.toolcalls.test_parser import replay

LLAMA3 = FORMATS["llama3_json"]
SMALL = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["n"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": SMALL}},
         {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}}]


def test_a_bare_object_at_the_start_is_a_call() -> None:
    text = '{"name": "f", "parameters": {"n": 3}}'
    for t in (text, text + '; {"name": "g", "parameters": {}}'):
        r = parse(LLAMA3, t)
        assert r.content is None and not r.open and not r.broken
        assert [(c.name, c.arguments, c.complete) for c in r.calls][0] == ("f", '{"n": 3}', True)
        for cuts in ([], list(range(len(t))), [1, 5, 9]):
            events, streamed = replay(LLAMA3, t, cuts)
            assert not [e for e in events if isinstance(e, Content)]
            assert [(c.name, c.arguments) for c in streamed.calls] == [(c.name, c.arguments) for c in r.calls]
    assert [c.name for c in parse(LLAMA3, text + '; {"name": "g", "parameters": {}}').calls] == ["f", "g"]


@pytest.mark.parametrize("text", ['Sure: {"name": "f", "parameters": {"n": 3}}', ' {"name": "f", "parameters": {}}',
                                  '{"other": 1}', '{"na', "{", ""])
def test_the_same_object_elsewhere_is_text(text) -> None:
    r = parse(LLAMA3, text)
    assert r.calls == [] and not r.open and (r.content or "") == text
    for cuts in ([], list(range(len(text)))):
        assert replay(LLAMA3, text, cuts)[1].content == r.content


def test_a_start_that_could_still_be_a_call_is_held_back() -> None:
    from haltwise.toolcalls.parser import ToolCallParser

    p = ToolCallParser(LLAMA3)
    assert p.feed('{"na') == [] and p.feed('me": "f') == []      # held, then a call has begun
    assert p.result().open
    q = ToolCallParser(LLAMA3)
    assert q.feed('{"na') == [] and q.feed("p") == [Content('{"nap')]


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["f", "g", "get_x"]), st.dictionaries(st.text("ab{}\"", max_size=3),
                                                                                   st.integers(), max_size=2)),
                      min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 200), max_size=6))
def test_start_calls_any_split(calls, cuts) -> None:
    text = "; ".join(LLAMA3.body_head(n) + json.dumps(a, separators=(", ", ": ")) + "}" for n, a in calls)
    whole = parse(LLAMA3, text)
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == calls and whole.content is None
    streamed = replay(LLAMA3, text, cuts)[1]
    assert [(c.name, c.arguments) for c in streamed.calls] == [(c.name, c.arguments) for c in whole.calls]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def backend(tok):
    return LLGuidanceBackend(tok, tok.vocab_size, tok.eos_token_ids())


def grammar(backend, tok, parallel: bool = True):
    plan = plan_tool_calls(parse_tool_request(TOOLS, "auto", parallel), tok, "llama3_json")
    return backend.compile(plan.structure)


def accepts(backend, tok, text: str, parallel: bool = True) -> bool:
    """The text, then an end token, is a complete answer under the auto grammar."""
    m = grammar(backend, tok, parallel).new_matcher()
    return all(m.consume(t) for t in tok.encode(text, add_special_tokens=False)) and \
        m.consume(min(tok.eos_token_ids())) and m.is_complete


@pytest.mark.parametrize("text, ok", [
    ('{"name": "f", "parameters": {"n": 3}}', True),
    ('{"name": "f", "parameters": {"n": 3}}; {"name": "g", "parameters": {}}', True),
    ('{"name": "f", "parameters": {"n": 12}}', False),          # the schema holds from the first character
    ('{"name": "h", "parameters": {}}', False),                  # an undeclared tool
    ('{"name": "f", "parameters": {"n": 3}} and more', False),   # a start call is the whole answer
    ('{"name": "f", "parameters": {"n": 3}', False),             # unclosed
    ('Hello {"name": "anything", "x": 1}', True),                # later: plain text
    ('{"other": 1}', True),
    ('<|python_tag|>{"name": "g", "parameters": {}}', True),
    ('', True),
])
def test_the_auto_grammar_reads_a_start_call(backend, tok, text, ok) -> None:
    assert accepts(backend, tok, text) is ok


def test_one_call_only_without_parallel(backend, tok) -> None:
    assert accepts(backend, tok, '{"name": "f", "parameters": {"n": 3}}', parallel=False)
    assert not accepts(backend, tok, '{"name": "f", "parameters": {"n": 3}}; {"name": "g", "parameters": {}}',
                       parallel=False)


@pytest.mark.parametrize("seed", range(12))
def test_random_walks_from_a_start_call_parse_and_validate(backend, tok, seed) -> None:
    """Random logits after the answer opened with `{"name": "`: the grammar forces a call that the parser
    reads complete and that validates, or the walk is still inside it (open), never text or broken."""
    g = grammar(backend, tok)
    m = g.new_matcher()
    ids = tok.encode('{"name": "', add_special_tokens=False)
    assert all(m.consume(t) for t in ids)
    gen = torch.Generator().manual_seed(seed)
    bits = torch.zeros(1, bitmask_width(tok.vocab_size), dtype=torch.int32)
    for _ in range(120):
        backend.fill_bitmask([m], bits)
        logits = torch.randn(1, tok.vocab_size, generator=gen) * 3
        apply_bitmask(logits, GrammarMask([0], bits))
        token = int(torch.multinomial(torch.softmax(logits / 1.5, dim=-1)[0], 1, generator=gen))
        assert m.consume(token), m.error
        if m.is_complete:
            break
        ids.append(token)
    r = parse(LLAMA3, tok.decode(ids))
    assert r.calls and not r.broken and r.content is None
    if m.is_complete:
        assert not r.open and all(c.complete for c in r.calls)
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for c in r.calls:
            jsonschema.validate(json.loads(c.arguments), schemas[c.name])
    else:
        assert r.open or any(not c.complete for c in r.calls)
