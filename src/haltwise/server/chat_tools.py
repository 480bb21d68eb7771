"""Every chat surface's use of haltwise.toolcalls: (tools, tool_choice, parallel_tool_calls, messages) ->
(plan, params, template messages, template keyword arguments); the caller renders them with
server/chat_prompt.py (user text kept as text).

The OpenAI chat route, Anthropic Messages and OpenAI Responses all come through here, so the same
request gets the same grammar, the same parser and the same prompt on every surface. Every ToolError
becomes a ParamError (400 + param).
"""
from __future__ import annotations

from typing import Any

from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.toolcalls import ToolError, ToolPlan, parse_tool_request, plan_tool_calls, template_messages
from haltwise.toolcalls.formats.phi4_mini import PHI4_MINI, shape_messages
from haltwise.toolcalls.plan import template_format


def prepare_chat(tools: Any, tool_choice: Any, parallel_tool_calls: Any, messages: list[dict[str, Any]],
                 params: SamplingParams, tokenizer: Any, parser_name: str | None,
                 ) -> tuple[ToolPlan | None, SamplingParams, list[dict[str, Any]], dict[str, Any]]:
    """(tool plan or None, params with the call grammar, messages for the template, template kwargs)."""
    try:
        plan = plan_tool_calls(parse_tool_request(tools, tool_choice, parallel_tool_calls), tokenizer, parser_name)
        checked = template_messages(messages)
        if plan is not None:
            params = plan.apply(params, checked)
        if template_format(tokenizer, parser_name) is PHI4_MINI:     # its template reads tools from a message
            checked = shape_messages(checked, plan.template_tools if plan is not None else None)
    except ToolError as e:
        raise ParamError(e.param, str(e)) from None
    return plan, params, checked, (plan.template_kwargs if plan is not None else {})
