"""`haltwise eval-surfaces`: the Anthropic Messages and OpenAI Responses checks, haltwise beside llama-server.

The same black-box checks the tests run on /v1/messages and /v1/responses (through the official
`anthropic` and `openai` clients, greedy), against `haltwise serve --model M` (default flags) and, in
the same run, llama.cpp's `llama-server --jinja` on the same GGUF (it serves both APIs). Each check
passes or fails with its reason; a check never compares the two servers' texts, only each server
against the API's contract (stop sequences cut exactly, max tokens read as cut, streamed == non-streamed,
tool use round trips, errors in the API's shape, count_tokens).
"""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from typing import Any, Callable

import httpx

from haltwise_bench import llama_cpp

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
ASK_WEATHER = "What is the weather in Paris right now? Use the tool."
GREEDY = {"temperature": 0.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a catalog name or GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-peer", action="store_true", help="haltwise alone")
    p.add_argument("--llama-bin", default=None)
    p.add_argument("--json", default=None, metavar="PATH")


def _clients(url: str) -> tuple[Any, Any]:
    import anthropic
    import openai

    return (anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=600),
            openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600))


def _need(ok: bool, why: str) -> None:
    if not ok:
        raise AssertionError(why)


def _stop_of(text: str) -> str:
    return next(text[i:i + 3] for i in range(len(text) // 3, len(text) - 2) if text[i:i + 3].strip())


def messages_checks(claude: Any, model: str) -> dict[str, Callable[[], None]]:
    def basic() -> None:
        m = claude.messages.create(model=model, max_tokens=16, system="You are terse.", messages=ASK, extra_body=GREEDY)
        _need(m.type == "message" and m.content[0].type == "text" and m.content[0].text, f"content {m.content}")
        _need(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {m.stop_reason}")
        n = claude.messages.count_tokens(model=model, system="You are terse.", messages=ASK).input_tokens
        _need(n == m.usage.input_tokens, f"count_tokens {n} != usage.input_tokens {m.usage.input_tokens}")

    def stop_sequence() -> None:
        free = claude.messages.create(model=model, max_tokens=24, messages=ASK, extra_body=GREEDY).content[0].text
        stop = _stop_of(free)
        ask = dict(model=model, max_tokens=24, messages=ASK, stop_sequences=[stop], extra_body=GREEDY)
        m = claude.messages.create(**ask)
        _need(m.content[0].text == free[:free.index(stop)], f"cut at {m.content[0].text!r}, stop {stop!r}")
        _need((m.stop_reason, m.stop_sequence) == ("stop_sequence", stop), f"{m.stop_reason}, {m.stop_sequence!r}")
        with claude.messages.stream(**ask) as s:
            text = "".join(e.delta.text for e in s if e.type == "content_block_delta" and e.delta.type == "text_delta")
        _need(text == m.content[0].text, f"streamed {text!r} != {m.content[0].text!r}")

    def max_tokens() -> None:
        m = claude.messages.create(model=model, max_tokens=3, messages=ASK, extra_body=GREEDY)
        _need(m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, f"{m.stop_reason}, {m.usage.output_tokens}")

    def tool_use() -> None:
        tools = [{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER}]
        msgs = [{"role": "user", "content": ASK_WEATHER}]
        m = claude.messages.create(model=model, max_tokens=60, messages=msgs, tools=tools, extra_body=GREEDY)
        uses = [b for b in m.content if b.type == "tool_use"]
        _need(m.stop_reason == "tool_use" and uses and uses[0].name == "get_weather" and "city" in uses[0].input,
              f"{m.stop_reason}, {m.content}")
        msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": "18C, sunny"}]}]
        a = claude.messages.create(model=model, max_tokens=60, messages=msgs, tools=tools, tool_choice={"type": "none"},
                                   extra_body=GREEDY)
        _need(a.stop_reason == "end_turn" and a.content and a.content[0].type == "text",
              f"{a.stop_reason}, {a.content}")

    def error_shape() -> None:
        import anthropic

        try:
            claude.messages.create(model=model, max_tokens=4, messages=[])
        except anthropic.BadRequestError as e:
            _need(isinstance(e.body, dict) and e.body.get("type") == "error", f"body {e.body}")
            return
        raise AssertionError("an empty messages list was accepted")

    return {"messages basic + count_tokens": basic, "messages stop_sequence (exact, streamed)": stop_sequence,
            "messages max_tokens": max_tokens, "messages tool_use round trip": tool_use,
            "messages error shape": error_shape}


def responses_checks(oai: Any, model: str) -> dict[str, Callable[[], None]]:
    text = ASK[0]["content"]

    def stream_equals() -> None:
        r = oai.responses.create(model=model, input=text, max_output_tokens=16, temperature=0)
        events = list(oai.responses.create(model=model, input=text, max_output_tokens=16, temperature=0, stream=True))
        streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        _need(r.output_text and streamed == r.output_text, f"streamed {streamed!r} != {r.output_text!r}")
        _need(events[-1].type in ("response.completed", "response.incomplete"), f"last event {events[-1].type}")

    def incomplete() -> None:
        r = oai.responses.create(model=model, input=text, max_output_tokens=3, temperature=0)
        reason = r.incomplete_details.reason if r.incomplete_details else None
        _need(r.status == "incomplete" and reason == "max_output_tokens", f"{r.status}, {reason}")

    def function_call() -> None:
        tools = [{"type": "function", "name": "get_weather", "description": "Current weather", "parameters": WEATHER}]
        r = oai.responses.create(model=model, input=ASK_WEATHER, tools=tools, max_output_tokens=60, temperature=0)
        calls = [it for it in r.output if it.type == "function_call"]
        _need(calls and calls[0].name == "get_weather" and "city" in json.loads(calls[0].arguments), f"{r.output}")
        follow = oai.responses.create(model=model, tools=tools, tool_choice="none", max_output_tokens=60,
                                      temperature=0, input=[
            {"role": "user", "content": ASK_WEATHER},
            {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
             "arguments": calls[0].arguments},
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C, sunny"}])
        _need(follow.status == "completed" and follow.output_text, f"{follow.status}, {follow.output_text!r}")

    def error_shape() -> None:
        import openai

        try:
            oai.responses.create(model=model, input=text, max_output_tokens=0)
        except openai.BadRequestError as e:
            _need(isinstance(e.body, dict) and "message" in e.body, f"body {e.body}")
            return
        raise AssertionError("max_output_tokens 0 was accepted")

    return {"responses stream == non-stream": stream_equals, "responses incomplete (max_output_tokens)": incomplete,
            "responses function_call round trip": function_call, "responses error shape": error_shape}


def check_server(url: str, model: str) -> dict[str, str]:
    """Every check's outcome on one server: "pass" or "FAIL: why"."""
    claude, oai = _clients(url)
    checks = {**messages_checks(claude, model), **responses_checks(oai, model)}
    outcomes = {}
    for name, check in checks.items():
        try:
            check()
            outcomes[name] = "pass"
        except Exception as e:   # a failed check, an HTTP error, a client that cannot parse: each is a finding
            outcomes[name] = f"FAIL: {type(e).__name__}: {str(e)[:160]}"
        print(f"[eval-surfaces] {url} {name}: {outcomes[name]}", file=sys.stderr, flush=True)
    return outcomes


def run(args: argparse.Namespace) -> int:
    from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd
    from haltwise.models.catalog import resolve_model

    gguf = resolve_model(args.model)
    directory = llama_cpp.bin_dir(args.llama_bin)
    peer = not args.no_peer and not llama_cpp.missing_binaries(directory)
    results: dict[str, dict[str, str]] = {}
    with ExitStack() as stack:
        port = free_port()
        ours = stack.enter_context(ServerProcess(haltwise_server_cmd(port, model=str(gguf), extra=(
            "--threads", str(args.threads))), port, "haltwise", "/ready", start_timeout_s=1800))
        name = httpx.get(ours.base_url + "/v1/models").json()["data"][0]["id"]
        results["haltwise"] = check_server(ours.base_url, name)
        if peer:
            port = free_port()
            cmd = llama_cpp.llama_server_cmd(directory, port, gguf, args.threads, 1, 8192) + ["--jinja"]
            theirs = stack.enter_context(ServerProcess(cmd, port, "llama-server", "/health", start_timeout_s=600))
            results["llama.cpp"] = check_server(theirs.base_url, name)
    names = list(results)
    print(f"eval-surfaces: {args.model}, official anthropic / openai clients, greedy")
    print(f"{'check':<44}" + "".join(f"{n:<12}" for n in names))
    for check in results["haltwise"]:
        print(f"{check:<44}" + "".join(f"{'pass' if results[n][check] == 'pass' else 'FAIL':<12}" for n in names))
    for n in names:
        for check, outcome in results[n].items():
            if outcome != "pass":
                print(f"  {n} / {check}: {outcome}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0
