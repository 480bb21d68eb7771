"""JSON mode's opener: a `json_object` answer begins after a hidden "```json" line, as chat models begin JSON.

Asked for JSON in a chat, instruction-tuned models open a fenced block ("```json", newline) and close it
when the object is done. Under the JSON-mode grammar the first token must be `{`, so the model starts from a
context it never saw in training; small models then wander (SmolLM2-135M nested `"data": {"type": "json",
...` until a loop was cut). Appending the opener line to the rendered prompt puts the model where it writes
JSON by itself, and it closes the object when its answer is done. The opener is prompt, not answer: the
content is the JSON alone, the grammar unchanged, prompt_tokens counts the opener's tokens.

Measured (SmolLM2-135M, greedy, the six json_object prompts of `haltwise eval-structured`): ended by the
grammar 2/6 without the opener, 5/6 with it (6/6 with unique keys) on the rounding before attention's FMA;
4/6 under FMA, with int8 scores and with int8 weighted values, other prompts each time (docs/structured.md:
a 135M model's greedy path is chaotic). Qwen2.5-Coder-0.5B 6/6 either way.

When it applies: `json_object` only (a json_schema names its keys, and the measured schema prompts did not
gain), a generation prompt added, no tools offered (a call must stay possible), and no think section in
the model's template (the reasoning comes first). `structured_outputs: {"json_object": true, "opener":
false}` turns it off.
"""
from __future__ import annotations

from typing import Any

from haltwise.structured.spec import StructuredOutputs

JSON_OPENER = "```json\n"


def json_opener(structure: StructuredOutputs | None, *, add_generation_prompt: bool, tools: bool,
                think_section: bool) -> str:
    """The text appended to a rendered chat prompt for this request ("" when the opener does not apply)."""
    applies = (structure is not None and structure.json_object and structure.opener and add_generation_prompt
               and not tools and not think_section)
    return JSON_OPENER if applies else ""


def append_opener(text: str, ids: list[int], opener: str, tokenizer: Any) -> tuple[str, list[int]]:
    """(text + opener, ids + the opener's own tokens): encoded apart, as the model would write them after the
    template's generation prompt (never merged with the template's last characters)."""
    if not opener:
        return text, ids
    return text + opener, ids + tokenizer.encode(opener, add_special_tokens=False)
