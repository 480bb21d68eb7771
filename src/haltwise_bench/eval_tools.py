"""`haltwise eval-tools`: do the tool calls a server emits parse, validate, and name the right tool?

Starts `haltwise serve --model M` (default flags) and, when its binary is there, llama.cpp's
`llama-server --jinja` on the same GGUF (bench/llama_cpp.py finds it; `make bench-setup` builds it),
both as subprocesses, and sends every prompt of the tool prompt set (src/haltwise_bench/data/tool_prompts.jsonl:
auto with and without a reason to call, required, named, parallel, tool_choice none, a turn after a tool
result) to each through the official `openai` client: greedy, the same max_tokens, alternating which
server goes first from prompt to prompt. Per server (definitions: bench/tool_scoring.py): the share of
emitted calls that parse and validate against their tool's schema (goal 100%), the share of prompts
where the model called the right tool (or rightly none), the finish_reason distribution, and the answers
that ended "stop" / "tool_calls" with an invalid structure (haltwise: must be 0).

The peer is skipped, with the reason printed and written to the JSON, when its binary is missing,
with --no-peer, and with --tiny (the random tiny model has no GGUF for it).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from haltwise_bench import common, llama_cpp
from haltwise_bench.common import Progress
from haltwise_bench.tool_scoring import Answer, ToolPrompt, load_prompt_set, summarize

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
PEER_CTX = 4096            # llama-server's context (one slot): the tool definitions fill the system prompt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"a GGUF file or a named model (default {DEFAULT_MODEL})")
    parser.add_argument("--max-tokens", type=int, default=192, help="per answer, both servers")
    parser.add_argument("--prompts", default=None, help="a JSONL tool prompt set (default: the shipped one)")
    parser.add_argument("--catalog", default=None, help="the tool catalog JSON the prompts name (default: shipped)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--no-peer", action="store_true", help="haltwise alone")
    parser.add_argument("--llama-bin", default=None, help=f"directory with llama-server (default "
                                                          f"$HALTWISE_LLAMA_CPP_BIN or {llama_cpp.DEFAULT_BIN})")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server's threads")
    parser.add_argument("--start-timeout", type=float, default=1800.0,
                        help="seconds a server may take to start (a default-flags start measures a kernel plan)")
    parser.add_argument("--json", default=None, help="write the figures and every answer here")
    parser.add_argument("--tiny", action="store_true", help="test only: haltwise serves the random tiny model")


def peer_skip_reason(args: argparse.Namespace) -> str | None:
    """Why llama-server does not run in this evaluation (None: it runs)."""
    if args.tiny:
        return "--tiny: the random tiny model has no GGUF for llama-server"
    if args.no_peer:
        return "--no-peer"
    directory = llama_cpp.bin_dir(args.llama_bin)
    if not os.access(directory / "llama-server", os.X_OK):
        return f"llama-server not found in {directory} (build it with `make bench-setup`)"
    return None


def run(args: argparse.Namespace) -> int:
    from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

    progress = Progress()
    prompts = load_prompt_set(args.prompts, args.catalog)[:args.limit]
    skipped = peer_skip_reason(args)
    if skipped:
        progress(f"llama-server skipped: {skipped}")
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # SIGTERM must still stop the servers
    try:
        with ExitStack() as stack:
            servers: dict[str, Any] = {}
            progress(f"starting haltwise serve ({'tiny' if args.tiny else args.model}, default flags)")
            port = free_port()
            model = None if args.tiny else args.model
            servers["haltwise"] = stack.enter_context(ServerProcess(
                haltwise_server_cmd(port, tiny=args.tiny, model=model), port, "haltwise", "/ready",
                start_timeout_s=args.start_timeout))
            if not skipped:
                from haltwise.models.catalog import resolve_model

                gguf = resolve_model(args.model)
                progress(f"starting llama-server --jinja ({gguf.name})")
                port = free_port()
                cmd = llama_cpp.llama_server_cmd(llama_cpp.bin_dir(args.llama_bin), port, gguf, args.threads, 1,
                                                 PEER_CTX) + ["--jinja"]
                servers["llama.cpp"] = stack.enter_context(ServerProcess(cmd, port, "llama-server", "/health",
                                                                         start_timeout_s=args.start_timeout))
            answers = evaluate({name: s.base_url for name, s in servers.items()}, prompts, args.max_tokens, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    summaries = [summarize(name, prompts, answers[name]) for name in answers]
    print(format_summary(summaries, args, skipped))
    print()
    print(format_per_prompt(prompts, answers, summaries))
    print(LEGEND)
    common.write_json(args.json, {
        "benchmark": "eval-tools", "environment": common.environment(), "model": "tiny" if args.tiny else args.model,
        "max_tokens": args.max_tokens, "prompts": [p.id for p in prompts], "peer_skipped": skipped,
        "servers": summaries, "answers": {name: [asdict(a) for a in a_list] for name, a_list in answers.items()}})
    return 0


def evaluate(base_urls: dict[str, str], prompts: list[ToolPrompt], max_tokens: int,
             progress: Progress) -> dict[str, list[Answer]]:
    """Every prompt to every server, one request at a time; who goes first alternates by prompt."""
    import openai

    clients = {name: openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=900)
               for name, url in base_urls.items()}
    model_ids = {name: c.models.list().data[0].id for name, c in clients.items()}
    answers: dict[str, list[Answer]] = {name: [] for name in clients}
    for i, prompt in enumerate(prompts):
        for name in list(clients)[:: 1 if i % 2 == 0 else -1]:
            answer = ask(clients[name], model_ids[name], name, prompt, max_tokens)
            calls = ", ".join(n for n, _ in answer.calls) or "-"
            progress(f"{i + 1}/{len(prompts)} {prompt.id:<18} {name:<9} {answer.finish_reason or answer.error} "
                     f"calls: {calls}")
            answers[name].append(answer)
    return answers


def ask(client: Any, model_id: str, server: str, prompt: ToolPrompt, max_tokens: int) -> Answer:
    """One greedy chat completion with the prompt's tools; an HTTP error is recorded, not raised."""
    import openai

    request: dict[str, Any] = dict(model=model_id, messages=list(prompt.messages), tools=list(prompt.tools),
                                   tool_choice=prompt.tool_choice, temperature=0, max_tokens=max_tokens)
    if prompt.parallel_tool_calls is not None:
        request["parallel_tool_calls"] = prompt.parallel_tool_calls
    start = time.perf_counter()
    try:
        response = client.chat.completions.create(**request)
    except openai.APIError as e:
        return Answer(server, prompt.id, error=f"{type(e).__name__}: {str(e)[:300]}",
                      latency_s=time.perf_counter() - start)
    choice = response.choices[0]
    termination = (choice.model_extra or {}).get("termination") or {}
    return Answer(server, prompt.id, choice.finish_reason, choice.message.content,
                  [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []],
                  termination.get("reason"), time.perf_counter() - start,
                  response.usage.completion_tokens if response.usage else None)


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def format_summary(summaries: list[dict[str, Any]], args: argparse.Namespace, skipped: str | None) -> str:
    model = "tiny (random)" if args.tiny else args.model
    head = (f"{'server':<10} {'prompts':>7} {'errors':>6} {'valid calls':>15} {'right tool':>14} {'exact':>6} "
            f"{'cut':>4} {'bad struct':>10} {'call text':>9} {'p50 s':>6}  finish reasons")
    lines = [f"eval-tools: {model}, greedy, max_tokens {args.max_tokens}" +
             (f"  [llama-server skipped: {skipped}]" if skipped else ""), head, "-" * len(head)]
    for s in summaries:
        finishes = ", ".join(f"{k} {v}" for k, v in s["finish_reasons"].items())
        p50 = "-" if s["latency_p50_s"] is None else f"{s['latency_p50_s']:.1f}"
        lines.append(f"{s['server']:<10} {s['prompts']:>7} {s['errors']:>6} {_share(s['valid_calls'], s['calls']):>15} "
                     f"{_share(s['right_tool'], s['prompts']):>14} {s['exact_calls']:>6} {s['cut_calls']:>4} "
                     f"{s['invalid_structure']:>10} "
                     f"{s['call_like_content']:>9} {p50:>6}  {finishes}")
    return "\n".join(lines)


def format_per_prompt(prompts: list[ToolPrompt], answers: dict[str, list[Answer]],
                      summaries: list[dict[str, Any]]) -> str:
    """One line per prompt: what was expected, and per server the calls, the finish reason and a verdict."""
    verdicts = {s["server"]: s["per_prompt"] for s in summaries}
    lines = [f"{'prompt':<18} {'kind':<10} {'expected':<32} " + " | ".join(f"{n:<40}" for n in answers)]
    for i, p in enumerate(prompts):
        cells = []
        for name, a_list in answers.items():
            a, v = a_list[i], verdicts[name][p.id]
            what = a.error[:30] if a.error else f"{','.join(n for n, _ in a.calls) or '-'} {a.finish_reason}"
            mark = "ok" if v["right_tool"] and not v["problems"] else "WRONG" if not v["problems"] else "INVALID"
            cells.append(f"{mark:<7} {what[:32]:<32}")
        lines.append(f"{p.id:<18} {p.kind:<10} {','.join(p.expect) or '(no call)':<32} " + " | ".join(cells))
    return "\n".join(lines)


LEGEND = """\
valid calls: of the calls in answers not ending "length", those that name a declared tool and whose
arguments parse and validate against its schema (calls cut by max_tokens: "cut calls" in the JSON).
right tool: prompts where the set of tools called equals the expected set (no call where none is right);
exact: also the number of calls (parallel prompts). cut: calls in answers cut by max_tokens. bad struct:
answers ending "stop"/"tool_calls" with an invalid call, or "tool_calls" with none (the structure
contract; must be 0 for haltwise). call text: answers whose text content holds call markup the server did
not read as a call. p50 s: latency per answer. Definitions: haltwise/bench/tool_scoring.py."""


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)
