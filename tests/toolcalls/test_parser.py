"""The streaming parser: any split of a text gives the same content and calls; no call text leaks as content."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from haltwise.toolcalls.formats import FORMATS, ToolFormat
from haltwise.toolcalls.parser import Arguments, CallStart, Content, ToolCallParser, parse

names = st.from_regex(r"[a-z_]{1,8}", fullmatch=True)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-99, 99) | st.text('ab"\\{}[] \n', max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("xy{", max_size=2),
                                                                                      inner, max_size=3),
                           max_leaves=5)
args = st.dictionaries(st.text('ab"}{', max_size=3), json_values, max_size=3)
free_text = st.text(alphabet="ab <>_[]|{}\n", max_size=12)


def render(fmt: ToolFormat, calls: list[tuple[str, dict]]) -> str:
    """Calls as the grammar writes them (compact JSON)."""
    bodies = [fmt.body_head(n) + json.dumps(a, separators=(", ", ": ")) + "}" for n, a in calls]
    if fmt.separator is None:
        return fmt.section_gap.join(fmt.trigger + fmt.prefix + b + fmt.suffix for b in bodies)
    return fmt.trigger + fmt.prefix + fmt.separator.join(bodies) + fmt.suffix


def replay(fmt: ToolFormat, text: str, cuts: list[int]):
    p = ToolCallParser(fmt)
    events, at = [], 0
    for c in sorted(set(min(c, len(text)) for c in cuts)) + [len(text)]:
        events += p.feed(text[at:c])
        at = c
    events += p.finish()
    return events, p.result()


@settings(max_examples=300, deadline=None)
@given(fmt=st.sampled_from(sorted(FORMATS)), before=free_text,
       calls=st.lists(st.tuples(names, args), min_size=0, max_size=3), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_any_split_gives_the_same_answer(fmt, before, calls, cuts) -> None:
    f = FORMATS[fmt]
    before = before.replace(f.trigger, "")
    text = before + (render(f, calls) if calls else "")
    whole = parse(f, text)
    events, streamed = replay(f, text, cuts)
    assert [(c.name, c.arguments, c.complete) for c in streamed.calls] == \
           [(c.name, c.arguments, c.complete) for c in whole.calls]
    assert streamed.content == whole.content
    assert [(n, json.loads(c.arguments)) for n, c in zip([n for n, _ in calls], whole.calls)] == calls
    assert len(whole.calls) == len(calls) and not whole.open and not whole.broken
    content = "".join(e.text for e in events if isinstance(e, Content))
    assert f.trigger not in content and (content or None) == (whole.content or None)
    for i, _ in enumerate(calls):   # per call: the name first, then fragments that join to the arguments
        mine = [e for e in events if getattr(e, "index", None) == i]
        assert isinstance(mine[0], CallStart) and all(isinstance(e, Arguments) for e in mine[1:])
        assert "".join(e.text for e in mine[1:]) == whole.calls[i].arguments


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_cut_call_is_open(fmt) -> None:
    f = FORMATS[fmt]
    text = render(f, [("f", {"a": [1, 2]})])
    for end in range(len(f.trigger), len(text) - len(f.suffix)):
        r = parse(f, text[:end])
        assert r.open or any(not c.complete for c in r.calls), (fmt, text[:end])


def test_only_calls_means_no_content() -> None:
    f = FORMATS["hermes"]
    r = parse(f, render(f, [("f", {}), ("g", {"x": 1})]))
    assert r.content is None and [c.name for c in r.calls] == ["f", "g"]
    assert parse(f, "Hello").content == "Hello" and parse(f, "Hello <tool").content == "Hello <tool"


def test_hermes_reads_a_json_fence_as_a_call() -> None:
    """Qwen2.5-Coder-0.5B's own habit: a ```json fence instead of <tool_call> (auto mode reads it too)."""
    f = FORMATS["hermes"]
    text = 'Sure.\n```json\n{"name": "f", "arguments": {"x": 1}}\n```'
    r = parse(f, text)
    assert r.content == "Sure." and [(c.name, c.arguments, c.complete) for c in r.calls] == [("f", '{"x": 1}', True)]
    events, streamed = replay(f, text, list(range(len(text))))
    assert streamed.content == r.content and "```" not in "".join(e.text for e in events if isinstance(e, Content))


def test_hermes_reads_a_bare_body_as_a_call() -> None:
    f = FORMATS["hermes"]
    text = 'Calling: {"name": "f", "arguments": {"x": [1]}} done'
    r = parse(f, text)
    assert r.content == "Calling: done" or r.content == "Calling:  done"
    assert [(c.name, c.arguments, c.complete) for c in r.calls] == [("f", '{"x": [1]}', True)]
    for cuts in ([], list(range(len(text)))):
        assert replay(f, text, cuts)[1].content == r.content
