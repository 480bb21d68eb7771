"""Tool definitions and tool_choice, validated into plain data (OpenAI's `tools` shape).

Every rule here is a 400 naming its `param` (ToolError), never a 5xx:
- tools: a list of 1..MAX_TOOLS objects {"type": "function", "function": {name, description?, parameters?, strict?}};
- name: 1-64 of [A-Za-z0-9_-] (OpenAI's rule), unique across the list;
- parameters: an object schema ({"type": "object", ...}); omitted = no arguments ({"type": "object",
  "properties": {}}). It is bounded (depth MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES values, MAX_SCHEMA_CHARS as
  JSON) by an iterative walk *before* anything recurses into it, then checked like a response_format
  schema (structured/schema_check.py: only keywords the grammar enforces);
- tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}} naming a declared
  tool; given without tools is a 400. Default: "auto" with tools (OpenAI's default), else no tools at all.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from haltwise.structured.schema_check import check_schema
from haltwise.structured.spec import StructureError

MAX_TOOLS = 128
MAX_SCHEMA_DEPTH = 32          # nesting of JSON values inside one parameters schema
MAX_SCHEMA_NODES = 4096        # JSON values inside one parameters schema
MAX_SCHEMA_CHARS = 32 * 1024   # one parameters schema as JSON text
MAX_DESCRIPTION_CHARS = 4096
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NO_ARGUMENTS = {"type": "object", "properties": {}}
CHOICES = ("none", "auto", "required", "named")


class ToolError(ValueError):
    """An invalid tool definition or tool_choice; `param` names the request field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str | None
    parameters: str            # the parameters JSON Schema, canonical JSON text (hashable)
    shown: str = ""            # the `function` object as the request gave it, JSON text ("": built from the above)

    @property
    def schema(self) -> dict:
        return json.loads(self.parameters)

    def to_openai(self) -> dict[str, Any]:
        """The tool as the chat template sees it: the request's own `function` object, its keys in the order
        given and `strict` kept (transformers' apply_chat_template hands the template the tools unchanged, and
        templates such as Qwen's write each with `tojson`), else OpenAI's shape built from the fields."""
        if self.shown:
            return {"type": "function", "function": json.loads(self.shown)}
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.schema
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolRequest:
    """What a request asks of tool calling. mode "named" calls exactly `name`."""

    tools: tuple[ToolSpec, ...]
    mode: str                  # one of CHOICES
    name: str | None = None
    parallel: bool = True      # parallel_tool_calls: more than one call per answer

    @property
    def callable_tools(self) -> tuple[ToolSpec, ...]:
        """The tools a call may name: all of them, or just the named one."""
        return tuple(t for t in self.tools if self.mode != "named" or t.name == self.name)


def parse_tool_request(tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None) -> ToolRequest | None:
    """Validated tools + tool_choice; None when the request declares no tools. Raises ToolError."""
    if tools is None:
        if tool_choice not in (None, "none"):
            raise ToolError("tool_choice", "tool_choice needs tools")
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise ToolError("parallel_tool_calls", "parallel_tool_calls must be a boolean")
        return None
    if not isinstance(tools, list) or not tools:
        raise ToolError("tools", "tools must be a non-empty list of tool objects")
    if len(tools) > MAX_TOOLS:
        raise ToolError("tools", f"at most {MAX_TOOLS} tools, got {len(tools)}")
    specs: list[ToolSpec] = []
    for i, raw in enumerate(tools):
        spec = _tool(raw, f"tools[{i}]")
        if any(s.name == spec.name for s in specs):
            raise ToolError(f"tools[{i}].function.name", f"duplicate tool name {spec.name!r}")
        specs.append(spec)
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolError("parallel_tool_calls", "parallel_tool_calls must be a boolean")
    mode, name = _choice(tool_choice, {s.name for s in specs})
    return ToolRequest(tuple(specs), mode, name, True if parallel_tool_calls is None else parallel_tool_calls)


def _tool(raw: Any, param: str) -> ToolSpec:
    if not isinstance(raw, dict):
        raise ToolError(param, "each tool must be an object")
    if raw.get("type") != "function":
        raise ToolError(f"{param}.type", "tool type must be 'function'")
    unknown = sorted(set(raw) - {"type", "function"})
    if unknown:
        raise ToolError(f"{param}.{unknown[0]}", f"unknown tool field {unknown[0]!r}")
    fn = raw.get("function")
    if not isinstance(fn, dict):
        raise ToolError(f"{param}.function", "a function tool needs a 'function' object")
    unknown = sorted(set(fn) - {"name", "description", "parameters", "strict"})
    if unknown:
        raise ToolError(f"{param}.function.{unknown[0]}", f"unknown function field {unknown[0]!r}")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolError(f"{param}.function.name", "the function name must be 1-64 characters of a-z, A-Z, 0-9, _ or -")
    description = fn.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS):
        raise ToolError(f"{param}.function.description", f"description must be a string of at most "
                        f"{MAX_DESCRIPTION_CHARS} characters")
    if fn.get("strict") is not None and not isinstance(fn.get("strict"), bool):
        raise ToolError(f"{param}.function.strict", "strict must be a boolean")
    where = f"{param}.function.parameters"
    schema = fn.get("parameters", NO_ARGUMENTS)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ToolError(where, 'parameters must be an object schema ({"type": "object", ...})')
    bound_schema(schema, where)
    try:
        check_schema(schema, where)
    except StructureError as e:
        raise ToolError(e.param, str(e)) from None
    return ToolSpec(name, description, json.dumps(schema, ensure_ascii=False, allow_nan=False),
                    json.dumps(fn, ensure_ascii=False, allow_nan=False))


def bound_schema(schema: Any, param: str) -> None:
    """Refuse a schema too deep, too large or not JSON, walking it iteratively (no recursion at all)."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > MAX_SCHEMA_DEPTH:
            raise ToolError(param, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if nodes > MAX_SCHEMA_NODES:
            raise ToolError(param, f"the schema has more than {MAX_SCHEMA_NODES} values")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
            raise ToolError(param, "the schema holds a NaN or infinite number")
    if len(json.dumps(schema, ensure_ascii=False)) > MAX_SCHEMA_CHARS:
        raise ToolError(param, f"the schema exceeds {MAX_SCHEMA_CHARS} characters as JSON")


def _choice(choice: Any, names: set[str]) -> tuple[str, str | None]:
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise ToolError("tool_choice", "tool_choice must be 'none', 'auto', 'required' or "
                            '{"type": "function", "function": {"name": ...}}')
        return choice, None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(choice.get("function"), dict):
        raise ToolError("tool_choice", 'a named tool_choice is {"type": "function", "function": {"name": ...}}')
    name = choice["function"].get("name")
    if not isinstance(name, str) or name not in names:
        raise ToolError("tool_choice.function.name", f"tool_choice names {name!r}, which is not among the tools")
    return "named", name
