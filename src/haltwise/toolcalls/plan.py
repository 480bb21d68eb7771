"""The surface-facing entry point: (tools, tool_choice) -> what the engine request and the template need.

    plan = plan_tool_calls(request, tokenizer, parser_name)     # request: spec.parse_tool_request(...)
    text = tokenizer.apply_chat_template(messages, **plan.template_kwargs)
    params = plan.apply(params)                                  # grammar + settle rule on SamplingParams
    ... generate ...
    plan.constraint.parse(text) / plan.constraint.parser()       # calls, for the answer or the stream

Any protocol surface (OpenAI chat, Anthropic Messages `tool_use`, Responses `function_call`) uses these
same calls; only the shaping of the answer differs. tool_choice "none": the tools are not shown to the
model (its template would invite a call), no grammar and no parsing: the answer is text. Harmony (gpt-oss)
takes auto without a grammar: its calls are read from the message header (formats/harmony.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from haltwise.sampling_params import SamplingParams
from haltwise.structured.spec import StructuredOutputs, StructureError
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.formats.base import ToolFormat
from haltwise.toolcalls.formats.harmony import HARMONY
from haltwise.toolcalls.formats.registry import format_for_template, get_format
from haltwise.toolcalls.grammar import tool_grammar
from haltwise.toolcalls.loop_watch import answered_calls
from haltwise.toolcalls.spec import ToolError, ToolRequest


@dataclass(frozen=True)
class ToolPlan:
    format: ToolFormat
    template_tools: list[dict] | None           # passed to the chat template as `tools`
    structure: StructuredOutputs | None         # the call grammar (None for tool_choice none)
    constraint: ToolCallConstraint | None       # the settle rule and the parser (None for none)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"tools": self.template_tools} if self.template_tools else {}

    def apply(self, params: SamplingParams, messages: list[dict[str, Any]] = ()) -> SamplingParams:
        """params with the call grammar and the settle rule; a second structure on the request is a 400.
        messages: the conversation (template_messages), whose answered calls a repeat is checked against."""
        if self.constraint is None:
            return params
        if params.structured_outputs is not None:
            raise ToolError(params.structured_outputs.param, "a response format / structured output cannot be "
                            "combined with tool calls; use tool_choice 'none' for a structured text answer")
        constraint = self.constraint
        if messages:
            constraint = dataclasses.replace(constraint, answered=answered_calls(messages))
        if self.structure is None:      # harmony: parsed and settled, no grammar (formats/harmony.py)
            return dataclasses.replace(params, tool_calls=constraint)
        return dataclasses.replace(params, structured_outputs=self.structure, tool_calls=constraint)

def template_format(tokenizer: Any, parser_name: str | None = None) -> ToolFormat:
    """The model's tool-call format: --tool-call-parser's, else the one its chat template shows."""
    template = getattr(getattr(tokenizer, "chat_template", None), "source", None)
    return get_format(parser_name) if parser_name else format_for_template(template)


def plan_tool_calls(request: ToolRequest | None, tokenizer: Any, parser_name: str | None = None) -> ToolPlan | None:
    """The plan for a validated tool request (None: the request has no tools). Raises ToolError."""
    if request is None:
        return None
    fmt = template_format(tokenizer, parser_name)
    if request.mode == "none":
        return ToolPlan(fmt, None, None, None)
    constraint = ToolCallConstraint(fmt.name, request.callable_tools, request.mode)
    if fmt is HARMONY:
        if request.mode != "auto":
            raise ToolError("tool_choice", "this model writes tool calls in harmony messages, whose header a "
                            "grammar cannot reach: only tool_choice 'auto' and 'none' are supported")
        return ToolPlan(fmt, [t.to_openai() for t in request.tools], None, constraint)
    added = tokenizer.added_token_texts()
    grammar = tool_grammar(fmt, request, added.get)
    names = ", ".join(t.name for t in request.callable_tools)
    try:
        structure = StructuredOutputs(grammar=grammar, name=f"tool call ({names})", param="tools")
    except StructureError as e:       # e.g. the tools' schemas together exceed the grammar size bound
        raise ToolError("tools", str(e)) from None
    return ToolPlan(fmt, [t.to_openai() for t in request.tools], structure, constraint)
