"""A small asyncio load client for OpenAI-compatible servers: streaming requests, SSE parsed by hand.

    result = await run_load("http://127.0.0.1:8000", prompts, concurrency=8, max_tokens=64)

`concurrency` clients run at once; each sends `rounds` streaming requests back to back, taking
prompts from the list in turn. Per request it records time to first token (request sent -> first
SSE event carrying text), latency (-> `data: [DONE]`), completion tokens (the `usage` chunk when
the server sends one for stream_options.include_usage, else the number of text-carrying events)
and the finish_reason. Errors are results too (status, message), never exceptions, so the stress
tool can reuse this under hostile load.

A benchmark stream is ok only when it ran its full length: finish_reason "length" and exactly
max_tokens completion tokens, as the server's usage chunk reports them. Anything else (a peer that
cut the stream, an eos or stop that slipped through ignore_eos, a loop detector, a missing usage
chunk) is a failed request, so truncated rows are never counted as throughput.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

import httpx

from haltwise_bench.common import percentile


@dataclass(frozen=True)
class RequestResult:
    ok: bool
    status: int                        # HTTP status (0: no response)
    ttft_s: float | None               # request sent -> first text event
    latency_s: float                   # request sent -> end of stream (or error)
    completion_tokens: int
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    wall_s: float                      # first request sent -> last stream ended
    results: tuple[RequestResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def failed(self) -> int:
        return len(self.results) - len(self.ok)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.ok)

    @property
    def tokens_per_s(self) -> float:
        """Completion tokens of successful requests / wall time (aggregate throughput)."""
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def ttft_percentile(self, q: float) -> float | None:
        return percentile([r.ttft_s for r in self.ok if r.ttft_s is not None], q)

    def summary(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "requests": len(self.results), "ok": len(self.ok),
                "failed": self.failed,
                "wall_s": self.wall_s, "completion_tokens": self.completion_tokens,
                "tokens_per_s": self.tokens_per_s, "ttft_p50_s": self.ttft_percentile(50),
                "ttft_p95_s": self.ttft_percentile(95),
                "errors": sorted({(r.error or str(r.status))[:120] for r in self.results if not r.ok})}


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any] | None]:
    """Yield each `data:` payload as JSON; None for `[DONE]`. Comments and other fields are skipped.

    An event may span several `data:` lines (joined with "\\n"); a blank line ends an event.
    """
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                payload, data = "\n".join(data), []
                yield None if payload.strip() == "[DONE]" else json.loads(payload)
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        payload = "\n".join(data)
        yield None if payload.strip() == "[DONE]" else json.loads(payload)


def _chunk_text(event: dict[str, Any]) -> tuple[str, str | None]:
    choices = event.get("choices") or []
    if not choices:
        return "", None
    c = choices[0]
    text = c.get("text")
    if text is None:
        text = (c.get("delta") or {}).get("content") or ""
    return text, c.get("finish_reason")


async def stream_completion(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> RequestResult:
    """POST one streaming request and read it to the end; ok only if it ran all payload["max_tokens"]."""
    start = time.perf_counter()
    ttft = None
    parts: list[str] = []
    events = 0
    usage_tokens = None
    finish = None
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode("utf-8", "replace")[:300]
                return RequestResult(False, response.status_code, None, time.perf_counter() - start, 0,
                                     error=f"HTTP {response.status_code}: {body}")
            async for event in sse_events(response.aiter_lines()):
                if event is None:
                    break
                if event.get("usage"):
                    usage_tokens = event["usage"].get("completion_tokens", usage_tokens)
                text, reason = _chunk_text(event)
                finish = reason or finish
                if text:
                    if ttft is None:
                        ttft = time.perf_counter() - start
                    parts.append(text)
                    events += 1
            tokens = usage_tokens if usage_tokens is not None else events
            latency, text = time.perf_counter() - start, "".join(parts)
            want = payload.get("max_tokens")
            if usage_tokens is None or finish != "length" or tokens != want:
                return RequestResult(False, 200, ttft, latency, tokens, text, finish,
                                     error=f"not run to length: finish_reason {finish}, {tokens} of {want} tokens"
                                           + ("" if usage_tokens is not None else " (no usage chunk)"))
            return RequestResult(True, 200, ttft, latency, tokens, text, finish)
    except (httpx.HTTPError, json.JSONDecodeError, OSError) as e:
        return RequestResult(False, 0, ttft, time.perf_counter() - start, 0, "".join(parts), finish,
                             error=f"{type(e).__name__}: {e}")


def completion_payload(prompt: str, max_tokens: int, model: str | None, extra: dict[str, Any] | None) -> dict:
    """A greedy streaming /v1/completions body asking for usage in the stream."""
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True}}
    if model is not None:
        body["model"] = model
    body.update(extra or {})
    return body


async def run_load(base_url: str, prompts: Sequence[str], concurrency: int, max_tokens: int,
                   model: str | None = None, extra_body: dict[str, Any] | None = None, rounds: int = 1,
                   timeout_s: float = 600.0, path: str = "/v1/completions") -> LoadResult:
    """`concurrency` streaming clients x `rounds` requests each; returns every request's result."""
    url = base_url.rstrip("/") + path
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    counter = iter(range(concurrency * rounds))

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits) as client:
        async def one_client() -> list[RequestResult]:
            out = []
            for i in counter:  # a shared iterator: clients take the next prompt index in turn
                payload = completion_payload(prompts[i % len(prompts)], max_tokens, model, extra_body)
                out.append(await stream_completion(client, url, payload))
            return out

        start = time.perf_counter()
        per_client = await asyncio.gather(*(one_client() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return LoadResult(concurrency, wall, tuple(r for rs in per_client for r in rs))
