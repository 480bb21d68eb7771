"""Tool calling: tool definitions -> a call grammar + a settle rule for the engine; text -> calls.

    spec.py        tools / tool_choice validated into ToolRequest (400s with param)
    formats/       one file per model family's call format; registry.py picks one
    grammar.py     the llguidance Lark grammar (required / named / auto)
    plan.py        ToolRequest + tokenizer -> ToolPlan (template tools, grammar, constraint)
    constraint.py  settles a finished sequence: tool_call / incomplete (length) / eos
    parser.py      streaming extraction of content and calls
    response.py    OpenAI chat message and stream deltas
    messages.py    chat history with tool_calls / tool messages, for the template
"""
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.messages import template_messages
from haltwise.toolcalls.plan import ToolPlan, plan_tool_calls
from haltwise.toolcalls.spec import ToolError, ToolRequest, ToolSpec, parse_tool_request

__all__ = ["ToolCallConstraint", "ToolError", "ToolPlan", "ToolRequest", "ToolSpec", "parse_tool_request",
           "plan_tool_calls", "template_messages"]
