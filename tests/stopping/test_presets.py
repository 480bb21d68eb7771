"""Structural presets: where each one cuts, what it keeps, for any chunking of the text."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from haltwise.stopping.presets import (DEFAULT_TURN_MARKERS, CodeBlockPreset, JsonPreset, LinePreset,
                                       ParagraphPreset, TurnPreset, _fence, make_preset)
from haltwise.stopping.stop_strings import Match


def run(preset, pieces):
    out = []
    for p in pieces:
        out += preset.feed(p)
    return out


def char_pieces(text):
    return list(text)


@pytest.mark.parametrize("split", [lambda t: [t], char_pieces])
def test_json_keeps_prose_and_cuts_right_after_value(split):
    text = 'Sure! Here it is: {"a": "}{]\\"{", "b": [1, {"c": "\\\\"}]} and more {"x": 1}'
    got = run(JsonPreset(), split(text))
    first = text.index("}]}") + 3
    assert got[0] == Match(first, first, "", "json")
    kept = text[:got[0].start]
    assert json.loads(kept[kept.index("{"):]) == {"a": '}{]"{', "b": [1, {"c": "\\"}]}
    assert len(got) == 2 and got[1].start == len(text)  # the next value is reported too


def test_json_array_and_nothing_held_back():
    p = JsonPreset()
    assert p.feed('[1, [2, "]"') == [] and p.pending() == 0
    assert p.feed("]]") == [Match(13, 13, "", "json")]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='ab{}[]"\\ \n'),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(alphabet='{}"\\a'), c, max_size=3),
                    max_leaves=8).filter(lambda v: isinstance(v, (list, dict))),
       st.text(alphabet="ab .:\n"), st.lists(st.integers(1, 5), max_size=30))
def test_json_cut_is_exactly_the_end_of_any_value(value, prose, sizes):
    doc = json.dumps(value)
    text = prose + doc + "\ntrailing"
    pieces, i = [], 0
    for n in sizes + [len(text)]:
        pieces.append(text[i:i + n])
        i += n
    got = run(JsonPreset(), pieces)
    assert got[0].start == len(prose) + len(doc)
    assert json.loads(text[len(prose):got[0].start]) == value


def test_line_cuts_before_the_newline():
    assert run(LinePreset(), ["first li", "ne\nsecond\n"]) == [Match(10, 11, "\n", "line"), Match(17, 18, "\n", "line")]


def test_paragraph_blank_line_with_spaces_and_holdback():
    p = ParagraphPreset()
    assert p.feed("one\ntwo") == [] and p.pending() == 0
    assert p.feed("\n  \t") == [] and p.pending() == 4  # "\n  \t" may still become a blank line
    assert p.feed("\nthree") == [Match(7, 12, "\n\n", "paragraph")]
    assert p.pending() == 0
    q = ParagraphPreset()
    assert q.feed("a\n b\n") == [] and q.pending() == 1


def test_code_block_keeps_closing_fence():
    text = "Here:\n```python\nprint('```')\n  ```  \nafter"
    for pieces in ([text], char_pieces(text)):
        got = run(CodeBlockPreset(), pieces)
        assert len(got) == 1
        assert text[:got[0].start] == "Here:\n```python\nprint('```')\n  ```"


def test_code_block_needs_same_char_and_long_enough_fence():
    text = "~~~~\n```\n~~~\n~~~~~ x\n~~~~~\nrest\n"
    got = run(CodeBlockPreset(), [text])
    assert [text[:m.start] for m in got] == ["~~~~\n```\n~~~\n~~~~~ x\n~~~~~"]
    # an indented (4 spaces) fence is code, not a fence; backtick info strings cannot hold backticks
    assert run(CodeBlockPreset(), ["    ```\nx\n```\n"]) == []
    assert run(CodeBlockPreset(), ["``` a`b\nx\n```\n"]) == []


def test_code_block_unclosed_fence_waits_for_line_end():
    p = CodeBlockPreset()
    assert p.feed("```\ncode\n```") == [] and p.pending() == 0
    assert p.feed("\n") == [Match(12, 12, "", "code_block")]


@pytest.mark.parametrize("line, fence", [
    ("```", ("`", 3)), ("~~~~ x", ("~", 4)), ("   ```py", ("`", 3)),     # up to 3 spaces of indent
    ("    ```", None), ("\t```", None), ("X```", None),                  # 4 spaces, a tab, a letter
    ("``", None), ("", None), ("   ", None), ("aaa", None), ("XXX", None),
])
def test_fence_lines(line, fence):
    assert _fence(line) == fence


@pytest.mark.parametrize("text, kept", [
    (" ```py\nx\n```\nrest", " ```py\nx\n```"),          # an indented opening fence
    ("```X`\nx\n```\ny\n```\n", "```X`\nx\n```\ny\n```"),   # "```X`" opens nothing: backtick in info
    ("```\nx\n```\t\ny\n```\n", "```\nx\n```\t\ny\n```"),   # only spaces may follow a closing fence
    ("```\nx\n```X\ny\n```\n", "```\nx\n```X\ny\n```"),
])
def test_code_block_opening_and_closing_lines(text, kept):
    got = run(CodeBlockPreset(), [text])
    assert text[:got[0].start] == kept


def test_code_block_reports_every_block_fed():
    text = "```\na\n```\nb\n~~~\nc\n~~~\n"
    assert [text[:m.start] for m in run(CodeBlockPreset(), [text])] == ["```\na\n```", text[:-1]]


def test_json_prose_may_hold_any_letter():
    text = 'Xbox data: {"a": 1} tail'
    assert run(JsonPreset(), [text]) == [Match(text.index("}") + 1, text.index("}") + 1, "", "json")]


def test_paragraph_a_line_of_letters_is_not_blank():
    text = "one\nX\ntwo\n\nthree"
    got = run(ParagraphPreset(), [text])
    assert text[:got[0].start] == "one\nX\ntwo"


def test_turn_markers_cut_before_marker_and_hold_back_prefixes():
    p = TurnPreset(["<|im_start|>", "\nUser:"])
    assert p.feed("Answer.\nUs") == [] and p.pending() == 3
    assert p.feed("er: hi") == [Match(7, 13, "\nUser:", "turn")]
    assert "<|im_start|>" in DEFAULT_TURN_MARKERS and "<|im_start|>" in TurnPreset().markers


def test_make_preset_names():
    for name in ("json", "line", "paragraph", "code_block", "turn"):
        assert hasattr(make_preset(name), "feed")
    assert make_preset("turn", ["STOP"]).markers == ("STOP",)
    with pytest.raises(ValueError):
        make_preset("xml")
