"""Agent libraries, unchanged, against `haltwise serve --model qwen2.5-coder-0.5b` (default flags).

Each case (tests/agents/cases/<library>.py) runs in the library's own venv (`make agents-venv`: the pinned
releases of requirements-agents*.txt; instructor pins an older openai, so it has a venv of its own), calls
the library as its docs show, and checks the answer (a name and an age extracted; the weather for Paris
answered from the get_weather tool's result). Every request body is recorded on the wire; each top-level
field the library sent must be one docs/agents.md lists for that route (the audit: accepted and honoured,
or accepted and documented as a no-op) -- a new SDK field fails here until it is understood.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.models.real_models import real_model_path
from tests.server.browser_helpers import serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # default-flags start measures a kernel plan

ROOT = Path(__file__).resolve().parents[2]
CASES_DIR = Path(__file__).parent / "cases"
VENVS = {"agents": Path(os.environ.get("HALTWISE_AGENTS_VENV", Path.home() / ".cache/haltwise/agents-venv")),
         "instructor": Path(os.environ.get("HALTWISE_INSTRUCTOR_VENV",
                                           Path.home() / ".cache/haltwise/instructor-venv"))}
CASES = {   # library script -> (venv, cases)
    "openai_sdk": ("agents", ["chat_parse", "beta_chat_parse", "chat_stream", "chat_tool_loop", "responses_parse",
                              "responses_stream", "responses_tool_loop"]),
    "anthropic_sdk": ("agents", ["tool_loop", "tool_runner", "stream_text", "parse"]),
    "openai_agents": ("agents", ["chat_tools", "responses_tools", "chat_output_type", "responses_output_type"]),
    "pydantic_ai_cases": ("agents", [f"{s}_{k}" for s in ("chat", "responses", "anthropic")
                                     for k in ("output_type", "tools")]),
    "langchain_openai_cases": ("agents", ["structured", "tool_loop", "stream", "responses_structured"]),
    "instructor_cases": ("instructor", ["tools_mode", "json_mode", "partial_stream"]),
}
ROUTES = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}


def documented_fields() -> dict[str, set[str]]:
    """docs/agents.md's audit table: rows `| route | field | ... |` -> {route: {field}}."""
    fields: dict[str, set[str]] = {}
    for route, field in re.findall(r"^\| (chat|responses|messages) \| `([a-z_]+)` \|", (ROOT / "docs/agents.md")
                                   .read_text(), re.M):
        fields.setdefault(route, set()).add(field)
    return fields


@pytest.fixture(scope="module")
def qwen() -> Iterator[str]:
    real_model_path("qwen2.5-coder-0.5b")
    yield from serve("--model", "qwen2.5-coder-0.5b", start_limit=900)


def run_case(url: str, library: str, case: str, wire: Path) -> tuple[dict, str]:
    venv = VENVS[CASES[library][0]]
    env = {**os.environ, "HALTWISE_WIRE_LOG": str(wire), "OPENAI_AGENTS_DISABLE_TRACING": "1",
           "LANGSMITH_TRACING": "false", "PYTHONPATH": str(CASES_DIR)}
    proc = subprocess.run([str(venv / "bin/python"), str(CASES_DIR / f"{library}.py"), case, url], env=env,
                          capture_output=True, text=True, timeout=900)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"ok": False, "detail": "no result line"}
    return {**result, "rc": proc.returncode}, proc.stderr[-3000:]


@pytest.mark.parametrize("library,case", [(lib, c) for lib, (_, cases) in CASES.items() for c in cases])
def test_library_case(library: str, case: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    venv = VENVS[CASES[library][0]]
    if not (venv / "bin/python").exists():     # checked before the server starts
        pytest.skip(f"{venv} is missing: `make agents-venv` builds it (`make test` does)")
    wire = tmp_path / "wire.jsonl"
    result, stderr = run_case(request.getfixturevalue("qwen"), library, case, wire)
    assert result["ok"] and result["rc"] == 0, f"{library}.{case}: {result['detail']}\n{stderr}"
    documented = documented_fields()
    for line in wire.read_text().splitlines():
        sent = json.loads(line)
        route = ROUTES.get(sent["path"])
        if route is None or not isinstance(sent["body"], dict):
            continue
        unknown = set(sent["body"]) - documented.get(route, set())
        assert not unknown, f"{library}.{case} sent {sorted(unknown)} on {sent['path']}: not in docs/agents.md"
