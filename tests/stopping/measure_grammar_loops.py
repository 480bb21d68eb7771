"""Measurement (not a test): should the loop detectors cut under a grammar, or be relaxed?

For each structured prompt on SmolLM2 (greedy), run twice: default loop detection, and none.
  false cut: detection cut it, but without detection the structure completes and validates
  runaway caught: detection cut it, and without detection it runs to max_tokens (no structure anyway)
Prints one JSON line per prompt and a summary. Usage: python -m tests.stopping.measure_grammar_loops
"""
from __future__ import annotations

import json
import sys

from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason

OBJ = {"type": "json_object"}
LIST = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
        "required": ["items"], "additionalProperties": False}
PEOPLE = {"type": "object", "properties": {"people": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"], "additionalProperties": False}}}, "required": ["people"], "additionalProperties": False}
CAT = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                        "description": {"type": "string"}},
       "required": ["name", "age", "description"], "additionalProperties": False}
PROMPTS = [
    ("Give me a JSON object describing a cat named Tom, age 3.", None),
    ("Give me a JSON object describing a cat named Tom, age 3.", CAT),
    ("Return a JSON object with the numbers from 1 to 30 in a list called items.", LIST),
    ("List five people with names and ages as JSON.", PEOPLE),
    ("List ten employees of a company with names and ages as JSON.", PEOPLE),
    ("Give a JSON object with keys a through j, each mapped to 0.", None),
    ("Return a JSON object with the multiplication table of 7 up to 7x12.", None),
]


def run(llm: LLM, prompt: str, schema: dict | None, detect: bool, max_tokens: int):
    so = {"json": schema} if schema else {"json_object": True}
    p = SamplingParams(temperature=0.0, max_tokens=max_tokens, structured_outputs=so,
                       repetition_detection=RepetitionDetection(enabled=detect))
    o = llm.chat([{"role": "user", "content": prompt}], p)[0].outputs[0]
    return o.termination.reason, len(o.token_ids), o.text


def main(max_tokens: int = 400) -> None:
    llm = LLM(dtype="float32")   # the exact mode: no host-measured kernel plan to wait for
    false_cuts = caught = cut = 0
    for prompt, schema in PROMPTS:
        on = run(llm, prompt, schema, True, max_tokens)
        off = run(llm, prompt, schema, False, max_tokens)
        row = {"prompt": prompt[:50], "schema": bool(schema), "on": [on[0].value, on[1]], "off": [off[0].value, off[1]]}
        if on[0] is Reason.REPETITION:
            cut += 1
            if off[0] is Reason.GRAMMAR:
                false_cuts += 1
                row["verdict"] = "false cut"
            else:
                caught += 1
                row["verdict"] = f"runaway caught ({off[1] - on[1]} tokens saved)"
        print(json.dumps(row), flush=True)
    print(json.dumps({"prompts": len(PROMPTS), "loop_cuts": cut, "false_cuts": false_cuts, "runaways_caught": caught,
                      "max_tokens": max_tokens}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
