"""How `haltwise eval-tools` judges one answer, and sums a server's answers (no HTTP, no model here).

The prompt set (src/haltwise_bench/data/tool_prompts.jsonl) names its tools from a catalog
(src/haltwise_bench/data/tool_catalog.json) and says which calls the right answer holds (`expect`: tool names,
one per call, [] = the right answer is no call). Per answer:

  calls          tool calls the server returned (message.tool_calls) in an answer it says is complete
                 (finish_reason not "length"); calls in a "length" answer are counted apart as cut calls
                 (haltwise shows a call cut by max_tokens as it stood)
  valid calls    of `calls`, those that name a tool the request declared and whose arguments parse as a JSON object
                 that validates against that tool's parameters schema (jsonschema)
  right tool     the set of names called (cut calls included) == the set expected (both empty counts:
                 a correct "no call")
  exact calls    the names called, with their counts, == expect (parallel prompts ask for several)
  invalid structure  finish_reason "stop" or "tool_calls" with a call that is not valid, or "tool_calls"
                 with no call at all (the structure contract: these finish reasons promise complete
                 structures; haltwise must have 0)
  call-like content  text content that holds call markup (`<tool_call>`, `<|python_tag|>`,
                 `[TOOL_CALLS]` or a `{"name": ...` object): a call the server did not read as one
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

PROMPT_SET = "tool_prompts.jsonl"
CATALOG = "tool_catalog.json"
_CALL_MARKUP = re.compile(r'<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\]|\{\s*"name"\s*:')


@dataclass(frozen=True)
class ToolPrompt:
    id: str
    kind: str                          # auto_call | auto_none | required | named | parallel | none
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]  # OpenAI tool definitions, from the catalog
    tool_choice: Any                   # "auto" | "required" | "none" | {"type": "function", ...}
    expect: tuple[str, ...]            # the right answer's calls, by tool name ([] = no call)
    parallel_tool_calls: bool | None = None   # None: not sent

    def schema(self, name: str) -> dict[str, Any] | None:
        """The parameters schema of a declared tool (None: not declared)."""
        for t in self.tools:
            if t["function"]["name"] == name:
                return t["function"].get("parameters", {"type": "object", "properties": {}})
        return None


def load_prompt_set(path: str | Path | None = None, catalog: str | Path | None = None) -> list[ToolPrompt]:
    """The prompts (JSONL) with their tools resolved from the catalog (defaults: the shipped files)."""
    def read(p: str | Path | None, name: str) -> str:
        return (Path(p).read_text(encoding="utf-8") if p is not None
                else resources.files("haltwise_bench").joinpath("data", name).read_text(encoding="utf-8"))

    tools = {t["function"]["name"]: t for t in json.loads(read(catalog, CATALOG))["tools"]}
    prompts = []
    for line in read(path, PROMPT_SET).splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        unknown = [n for n in r["tools"] if n not in tools]
        if unknown:
            raise ValueError(f"prompt {r['id']}: tools {unknown} are not in the catalog")
        prompts.append(ToolPrompt(r["id"], r["kind"], tuple(r["messages"]), tuple(tools[n] for n in r["tools"]),
                                  r.get("tool_choice", "auto"), tuple(r["expect"]), r.get("parallel_tool_calls")))
    return prompts


@dataclass
class Answer:
    """One server's answer to one prompt (error: the request failed; the rest is then empty)."""

    server: str
    prompt_id: str
    finish_reason: str | None = None
    content: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)   # (name, arguments JSON text)
    termination: str | None = None     # haltwise's termination.reason (None for a peer)
    latency_s: float | None = None
    completion_tokens: int | None = None
    error: str | None = None


def call_problem(prompt: ToolPrompt, name: str, arguments: str) -> str:
    """Why a call is not valid for this prompt's tools ("" when it is)."""
    schema = prompt.schema(name)
    if schema is None:
        return f"undeclared tool {name!r}"
    try:
        args = json.loads(arguments)
    except ValueError as e:
        return f"arguments do not parse: {e}"
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        return f"arguments do not validate: {e.message}"
    except jsonschema.SchemaError as e:       # the catalog's fault, not the server's; say so loudly
        raise ValueError(f"tool {name}: bad schema in the catalog: {e.message}") from None
    return ""


def score(prompt: ToolPrompt, answer: Answer) -> dict[str, Any]:
    """The per-answer verdicts (module docstring)."""
    if answer.error is not None:
        return {"error": True, "calls": 0, "cut_calls": 0, "valid_calls": 0, "right_tool": False,
                "exact_calls": False, "invalid_structure": False, "call_like_content": False,
                "problems": [answer.error]}
    cut = answer.finish_reason == "length"
    counted = [] if cut else answer.calls
    problems = [p for p in (call_problem(prompt, n, a) for n, a in counted) if p]
    names = [n for n, _ in answer.calls]
    ends_complete = answer.finish_reason in ("stop", "tool_calls")
    return {
        "error": False,
        "calls": len(counted),
        "cut_calls": len(answer.calls) - len(counted),
        "valid_calls": len(counted) - len(problems),
        "right_tool": set(names) == set(prompt.expect),
        "exact_calls": Counter(names) == Counter(prompt.expect),
        "invalid_structure": ends_complete and bool(problems) or
                             (answer.finish_reason == "tool_calls" and not answer.calls),
        "call_like_content": bool(answer.content and _CALL_MARKUP.search(answer.content)),
        "problems": problems,
    }


def summarize(server: str, prompts: list[ToolPrompt], answers: list[Answer]) -> dict[str, Any]:
    """One server's figures over the prompt set."""
    by_id = {p.id: p for p in prompts}
    verdicts = [score(by_id[a.prompt_id], a) for a in answers]
    n = len(answers)
    calls = sum(v["calls"] for v in verdicts)
    valid = sum(v["valid_calls"] for v in verdicts)
    latencies = sorted(a.latency_s for a in answers if a.latency_s is not None)
    return {
        "server": server,
        "prompts": n,
        "errors": sum(v["error"] for v in verdicts),
        "calls": calls,
        "cut_calls": sum(v["cut_calls"] for v in verdicts),
        "valid_calls": valid,
        "valid_share": valid / calls if calls else None,
        "right_tool": sum(v["right_tool"] for v in verdicts),
        "right_tool_share": sum(v["right_tool"] for v in verdicts) / n if n else None,
        "exact_calls": sum(v["exact_calls"] for v in verdicts),
        "invalid_structure": sum(v["invalid_structure"] for v in verdicts),
        "call_like_content": sum(v["call_like_content"] for v in verdicts),
        "finish_reasons": dict(Counter(a.finish_reason or "error" for a in answers).most_common()),
        "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "per_prompt": {a.prompt_id: v for a, v in zip(answers, verdicts)},
    }
