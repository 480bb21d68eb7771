"""JSON mode's opener (structured/opener.py): when the hidden "```json" line is added, and how it is encoded."""
from __future__ import annotations

import pytest

from haltwise.structured.opener import JSON_OPENER, append_opener, json_opener
from haltwise.structured.spec import StructuredOutputs

OBJ = StructuredOutputs(json_object=True)
ON = dict(add_generation_prompt=True, tools=False, think_section=False)


@pytest.mark.parametrize("structure, changes, expect", [
    (OBJ, {}, JSON_OPENER),
    (None, {}, ""),
    (StructuredOutputs(json={"type": "object"}), {}, ""),           # a schema names its keys: no opener
    (StructuredOutputs(regex="a+"), {}, ""),
    (StructuredOutputs(json_object=True, opener=False), {}, ""),     # the per-request opt-out
    (OBJ, {"tools": True}, ""),                                      # a tool call must stay possible
    (OBJ, {"think_section": True}, ""),                              # the reasoning comes first
    (OBJ, {"add_generation_prompt": False}, ""),
])
def test_when_the_opener_applies(structure, changes, expect) -> None:
    assert json_opener(structure, **{**ON, **changes}) == expect


def test_the_opener_is_encoded_apart_from_the_template(smol_tok) -> None:
    text = smol_tok.apply_chat_template([{"role": "user", "content": "JSON please"}], add_generation_prompt=True)
    ids = smol_tok.encode(text, add_special_tokens=False)
    new_text, new_ids = append_opener(text, ids, JSON_OPENER, smol_tok)
    assert new_text == text + JSON_OPENER
    assert new_ids[:len(ids)] == ids and smol_tok.decode(new_ids[len(ids):]) == JSON_OPENER
    assert append_opener(text, ids, "", smol_tok) == (text, ids)
