"""A conversation -> (prompt text, prompt ids) for every chat route: the model's template, with user and
tool text kept as text (tokenizer/untrusted.py) unless the server runs with
`--allow-special-tokens-in-content`. A template that rejects the messages is a 400 on `messages`.

Tool-call arguments arrive as JSON strings (OpenAI's shape) but templates write them with `tojson`
(Qwen, Hermes, Llama 3): a string argument that holds a JSON object is handed to the template as that
object, as vLLM does, so the model sees `"arguments": {...}`, the form it was trained on.

gpt-oss's template (a harmony vocabulary) reads an assistant's analysis from `thinking`, not
`reasoning_content`: there the reasoning is handed over under that name too."""
from __future__ import annotations

import json
from typing import Any

from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.stopping.harmony import HarmonyMarkers
from haltwise.stopping.reasoning import ReasoningTags
from haltwise.structured.opener import append_opener, json_opener


def chat_prompt(served: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                **extra: Any) -> tuple[str, list[int]]:
    """(rendered text, ids) of a conversation for the model a request is served by (state.Served: its own
    template and ChatEncoder), ready for the engine (no BOS/EOS added: the template writes them)."""
    allow = served.st.allow_special_tokens_in_content
    try:
        harmony = HarmonyMarkers.of(served.tokenizer) is not None
        return served.chat_encoder().encode_chat(for_template(messages, harmony),
                                                 add_generation_prompt=add_generation_prompt,
                                                 allow_special=allow, **extra)
    except ValueError as exc:
        raise ParamError("messages", str(exc)) from exc
    except TypeError as exc:   # a template variable of a type the template cannot use (chat_template_kwargs)
        raise ParamError("chat_template_kwargs", f"the chat template could not render this request: {exc}") from exc


def answer_prompt(served: Any, messages: list[dict[str, Any]], params: SamplingParams, calls_allowed: bool,
                  **extra: Any) -> tuple[str, list[int]]:
    """chat_prompt with a generation prompt, then JSON mode's hidden opener line where it applies
    (structured/opener.py; `calls_allowed`: the request lets the model call tools; `extra`: template
    variables, the tools list among them). A model that reasons first (think tags, harmony) gets none."""
    text, ids = chat_prompt(served, messages, **extra)
    tok = served.tokenizer
    opener = json_opener(params.structured_outputs, add_generation_prompt=True, tools=calls_allowed,
                         think_section=HarmonyMarkers.of(tok) is not None or ReasoningTags.of(tok) is not None)
    return append_opener(text, ids, opener, tok)


def for_template(messages: list[dict[str, Any]], harmony: bool = False) -> list[dict[str, Any]]:
    """`messages` with each tool call's JSON-object `arguments` string parsed (other messages unchanged);
    harmony: an assistant's reasoning_content also as `thinking`."""
    out = [{**m, "tool_calls": [_parsed(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
           for m in messages]
    if harmony:
        out = [{**m, "thinking": m["reasoning_content"]} if m.get("role") == "assistant" and
               m.get("reasoning_content") and "thinking" not in m else m for m in out]
    return out


def _parsed(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**fn, "arguments": args}} if isinstance(args, dict) else call
