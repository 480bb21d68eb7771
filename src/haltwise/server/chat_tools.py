"""The chat route's use of haltwise.toolcalls: request fields -> (plan, params, template messages, template
keyword arguments); the route renders them with server/chat_prompt.py (user text kept as text).

Kept out of api.py so the route stays a short script; every ToolError becomes a ParamError (400 + param).
"""
from __future__ import annotations

from typing import Any

from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.toolcalls import ToolError, ToolPlan, parse_tool_request, plan_tool_calls, template_messages


def prepare_chat(body: Any, params: SamplingParams, tokenizer: Any,
                 parser_name: str | None) -> tuple[ToolPlan | None, SamplingParams, list[dict[str, Any]], dict[str, Any]]:
    """(tool plan or None, params with the call grammar, messages for the template, template kwargs)."""
    try:
        plan = plan_tool_calls(parse_tool_request(body.tools, body.tool_choice, body.parallel_tool_calls),
                               tokenizer, parser_name)
        messages = template_messages(body.template_messages())
        if plan is not None:
            params = plan.apply(params)
    except ToolError as e:
        raise ParamError(e.param, str(e)) from None
    return plan, params, messages, (plan.template_kwargs if plan is not None else {})
