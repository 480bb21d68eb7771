"""`haltwise stress`: a hostile load against a running haltwise server, then an accounting of every request.

    haltwise stress --url http://127.0.0.1:8000 --clients 64 --duration 120 --json stress.json

N clients send back to back until --duration seconds or --requests requests (whichever first), then
stop by themselves. The mix: streaming and non-streaming completions and chat, prompts of several
kinds (short, long, multilingual, repetitive, token ids), stop strings, per-request deadlines
(`timeout`), clients that disconnect at a random point, invalid requests (bad params, malformed JSON,
unknown fields, wrong types, unknown model) and prompts longer than the window. Afterwards it waits
for the server to drain, reads /metrics and prints the report (stress_report.py). Exit code 1 when an
invariant fails (stress_report.py lists them: among others a 5xx for a valid request, a server that
refuses most valid requests, an invalid request accepted, leaked KV blocks, counters that disagree
with what the client saw, a missing metric, a malformed 200 answer).
Loopback servers only unless --allow-remote.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, replace
from typing import Any

import httpx

from haltwise_bench.load_client import sse_events
from haltwise_bench.stress_plan import Plan, StressConfig, is_loopback, plan_request
from haltwise_bench.stress_report import Result, build_report, format_report, outcome_for_status, parse_metrics


class Malformed(Exception):
    """A 200 answer that is not a completion (missing or mistyped fields)."""


async def send(client: httpx.AsyncClient, plan: Plan) -> Result:
    """Send one planned request and classify what came back (never raises)."""
    start = time.perf_counter()
    content = plan.body if isinstance(plan.body, bytes) else json.dumps(plan.body).encode()
    state: dict[str, Any] = {"ttft": None}
    try:
        work = _exchange(client, plan, content, start, state)
        if plan.disconnect_after is None:
            result = await work
        else:
            result = await asyncio.wait_for(work, plan.disconnect_after)
    except asyncio.TimeoutError:  # our own disconnect: the connection is closed mid-request
        return Result(plan.kind, "cancelled_by_client", 0, plan.stream, state["ttft"])
    except Malformed as e:
        return Result(plan.kind, "error/malformed", 200, plan.stream, state["ttft"], code=str(e)[:200])
    except (httpx.HTTPError, OSError, ValueError) as e:
        return Result(plan.kind, "error/transport", 0, plan.stream, state["ttft"], code=type(e).__name__)
    body = plan.body if isinstance(plan.body, dict) else {}
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    text = state.get("text", "")
    max_tokens, timeout = body.get("max_tokens"), body.get("timeout")
    return replace(result, max_tokens=max_tokens if isinstance(max_tokens, int) else None,
                   timeout_s=timeout if isinstance(timeout, (int, float)) else None,
                   stop_leaked=result.outcome.startswith("completed/") and any(s and s in text for s in stops))


def _choice_text(choice: dict[str, Any]) -> str:
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or choice.get("message") or {}).get("content") or ""
    if not isinstance(text, str):
        raise Malformed(f"choice text is {type(text).__name__}")
    return text


async def _exchange(client: httpx.AsyncClient, plan: Plan, content: bytes, start: float, state: dict) -> Result:
    headers = {"content-type": "application/json"}
    async with client.stream("POST", plan.path, content=content, headers=headers) as response:
        if response.status_code != 200:
            raw = await response.aread()
            try:
                code = json.loads(raw)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            retry = "retry-after" in response.headers
            return Result(plan.kind, outcome_for_status(response.status_code, code, retry), response.status_code,
                          plan.stream, latency_s=time.perf_counter() - start, code=code, retry_after=retry)
        try:
            return await _read_completion(plan, response, start, state)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise Malformed(f"{type(e).__name__}: {e}") from None


async def _read_completion(plan: Plan, response: httpx.Response, start: float, state: dict) -> Result:
    """A 200 answer: its termination reason, token count and text (into state["text"])."""
    if not plan.stream:
        data = json.loads(await response.aread())
        choice = data["choices"][0]
        state["text"] = _choice_text(choice)
        reason = choice["termination"]["reason"]
        return Result(plan.kind, f"completed/{reason}", 200, False, None, time.perf_counter() - start,
                      int(data["usage"]["completion_tokens"]))
    reason, tokens, parts = None, None, []
    async for event in sse_events(response.aiter_lines()):
        if event is None:  # [DONE]
            if reason is None or tokens is None:
                raise Malformed("stream ended without a finish_reason or a usage chunk")
            state["text"] = "".join(parts)
            return Result(plan.kind, f"completed/{reason}", 200, True, state["ttft"], time.perf_counter() - start,
                          tokens)
        if "error" in event:
            return Result(plan.kind, "error/stream", 200, True, state["ttft"], code=event["error"].get("code"))
        if event.get("usage"):
            tokens = int(event["usage"]["completion_tokens"])
        if "usage" not in event and not isinstance(event.get("choices"), list):
            raise Malformed("an event with neither choices nor usage")
        for choice in event.get("choices") or []:
            text = _choice_text(choice)
            parts.append(text)
            if text and state["ttft"] is None:
                state["ttft"] = time.perf_counter() - start
            if choice.get("finish_reason"):
                reason = choice["termination"]["reason"]
    return Result(plan.kind, "error/transport", 200, True, state["ttft"], code="stream ended without [DONE]")


async def _drain(client: httpx.AsyncClient, limit: float) -> tuple[dict, bool]:
    """Poll /metrics until nothing runs or waits and every block is free (or `limit` passes)."""
    deadline = time.monotonic() + limit
    while True:
        samples = parse_metrics((await client.get("/metrics")).text)
        idle = all(samples.get((n, ())) == 0 for n in
                   ("haltwise_requests_running", "haltwise_requests_waiting", "haltwise_kv_blocks_used"))
        if idle or time.monotonic() > deadline:
            return samples, idle
        await asyncio.sleep(0.25)


async def run_stress(cfg: StressConfig) -> dict[str, Any]:
    """Run the load and return the report (see stress_report.build_report)."""
    limits = httpx.Limits(max_connections=cfg.clients + 8, max_keepalive_connections=cfg.clients + 8)
    timeout = httpx.Timeout(cfg.request_timeout + 60.0, connect=30.0)
    async with httpx.AsyncClient(base_url=cfg.url, timeout=timeout, limits=limits) as client:
        models = (await client.get("/v1/models")).json()["data"][0]
        model, window = models["id"], int(models.get("max_model_len") or 8192)
        before = parse_metrics((await client.get("/metrics")).text)
        results: list[Result] = []
        issued = 0
        start = time.monotonic()

        def take() -> bool:
            nonlocal issued
            if time.monotonic() - start >= cfg.duration or (cfg.requests is not None and issued >= cfg.requests):
                return False
            issued += 1
            return True

        async def one_client(i: int) -> None:
            rng = random.Random(cfg.seed * 100_003 + i)
            while take():
                results.append(await send(client, plan_request(rng, cfg, model, window)))

        await asyncio.gather(*(one_client(i) for i in range(cfg.clients)))
        wall = time.monotonic() - start
        after, drained = await _drain(client, cfg.drain_timeout)
    return build_report(results, issued, wall, asdict(cfg), before, after, drained,
                        cfg.max_refused_share, cfg.deadline_slack_s)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `haltwise stress`."""
    a = parser.add_argument
    a("--url", default="http://127.0.0.1:8000", help="base URL of a running haltwise server")
    a("--allow-remote", action="store_true", help="allow a non-loopback server (off: loopback only)")
    a("--clients", type=int, default=64, help="concurrent clients")
    a("--duration", type=float, default=120.0, help="seconds to send for (then drain and report)")
    a("--requests", type=int, default=None, help="stop after this many requests (also bounded by --duration)")
    a("--max-tokens", type=int, default=64, help="upper bound of each request's max_tokens")
    a("--stream-rate", type=float, default=0.5, help="share of streaming requests")
    a("--disconnect-rate", type=float, default=0.2, help="share of clients that disconnect at a random point")
    a("--invalid-rate", type=float, default=0.1, help="share of invalid requests")
    a("--oversize-rate", type=float, default=0.05, help="share of prompts longer than the window")
    a("--deadline-rate", type=float, default=0.15, help="share of requests with a short `timeout`")
    a("--drain-timeout", type=float, default=120.0, help="seconds to wait for the server to go idle")
    a("--seed", type=int, default=0)
    a("--max-refused-share", type=float, default=0.5,
      help="fail when more than this share of the answered valid requests is refused (429/503/4xx)")
    a("--deadline-slack", type=float, default=5.0, help="seconds a deadline may be overrun before it fails")
    a("--json", default=None, metavar="PATH", help="write the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the stress load; 0 when every invariant holds, 1 when one fails, 2 for a refused or unreachable target."""
    if not is_loopback(args.url) and not args.allow_remote:
        print(f"haltwise stress: refusing non-loopback {args.url} (pass --allow-remote)")
        return 2
    cfg = StressConfig(args.url.rstrip("/"), args.clients, args.duration, args.requests, args.max_tokens,
                       args.stream_rate, disconnect_rate=args.disconnect_rate, invalid_rate=args.invalid_rate,
                       oversize_rate=args.oversize_rate, deadline_rate=args.deadline_rate,
                       drain_timeout=args.drain_timeout, seed=args.seed, max_refused_share=args.max_refused_share,
                       deadline_slack_s=args.deadline_slack)
    try:
        report = asyncio.run(run_stress(cfg))
    except (httpx.HTTPError, OSError, KeyError, ValueError) as e:  # no server there, or not a haltwise one
        print(f"haltwise stress: cannot use the server at {cfg.url}: {type(e).__name__}: {e}")
        return 2
    print(format_report(report), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if report["ok"] else 1
