"""Llama 3.x JSON tool calls: `{"name": ..., "parameters": {...}}`, several joined by "; ".

Two openers, as llama.cpp's Llama 3.x handler reads them:
- the bare JSON object *at the start of the answer* (what the Llama 3.1/3.2 templates ask the model to
  write): `{"name": "` as the answer's first characters opens a call; the same text later in an answer is
  plain text (llama.cpp's trigger is a full-match pattern anchored at the start, and so is this one);
- `<|python_tag|>` anywhere (the model's own tool-call tag); required / named write this form.
In tool_choice "auto" the grammar (toolcalls/grammar.py) therefore lets the answer either begin with a
call or be text that does not begin with `{"name": "`. Unlike llama.cpp (one call), "; " may join
further calls when parallel calls are allowed, as vLLM's llama3_json parser reads them.
"""
from haltwise.toolcalls.formats.base import ToolFormat

LLAMA3 = ToolFormat(name="llama3_json", trigger="<|python_tag|>", prefix="", suffix="", separator="; ",
                    args_key="parameters", section_gap="", template_marks=("<|python_tag|>", "ipython"),
                    start_openers=(('{"name": "', None, ""),))
