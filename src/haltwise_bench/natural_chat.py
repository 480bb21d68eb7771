"""The natural-chat workload of `haltwise bench peers`: everyday prompts whose answers end by themselves.

Each prompt is one streamed, greedy (temperature 0) /v1/chat/completions request: each server applies the
model's own chat template; no ignore_eos, so the answer ends where the model ends it, under a generous
max_tokens cap (a request that reaches the cap is counted as `capped`, not failed). N clients take the
prompts in order, one after another, so every system gets the same prompts in the same order.

Per request: TTFT (sent -> first content), decode speed = completion tokens after the first / time from the
first content to the end of the stream (the usage chunk). Per run: the median of those decode speeds
(`stream_tok_s`), the aggregate completion tokens / wall (`tokens_per_s`), TTFT p50/p95. A peer that reports
its own speculation in the stream (llama-server's `timings.draft_n` / `draft_n_accepted`) has it summed.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx

from haltwise_bench.common import median, percentile
from haltwise_bench.load_client import _chunk_text, sse_events

PROMPTS = (
    "What is the capital of France?",
    "How do I boil an egg so the yolk stays soft?",
    "Write a Python function that checks whether a string is a palindrome.",
    "What are the main differences between a list and a tuple in Python?",
    "Suggest a name for a small bakery and explain why in one sentence.",
    "Summarise the plot of Romeo and Juliet in three sentences.",
    "Give me three tips for sleeping better.",
    "What is the difference between weather and climate?",
    "Write a short, friendly email declining a meeting invitation.",
    "Explain what a variable is in programming to a beginner.",
    "How many minutes are there in a day? Show the calculation.",
    "Recommend a simple vegetarian dinner and list its ingredients.",
)
MAX_TOKENS = 256        # a generous cap: most everyday answers end well before it


@dataclass(frozen=True)
class ChatResult:
    """One streamed chat request; an HTTP error or a broken stream is a result with ok False."""

    ok: bool
    ttft_s: float | None                 # sent -> first content
    decode_s: float | None               # first content -> end of stream
    completion_tokens: int
    finish_reason: str | None
    error: str | None = None
    peer_drafted: int = 0                # the server's own speculation report, where it sends one
    peer_accepted: int = 0

    @property
    def capped(self) -> bool:
        return self.finish_reason == "length"

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Completion tokens after the first / time after the first (None for a one-token answer)."""
        if self.completion_tokens < 2 or not self.decode_s or self.decode_s <= 0:
            return None
        return (self.completion_tokens - 1) / self.decode_s


@dataclass(frozen=True)
class ChatLoad:
    concurrency: int
    wall_s: float
    results: tuple[ChatResult, ...] = field(default_factory=tuple)

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.results if r.ok]
        tokens = sum(r.completion_tokens for r in ok)
        ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
        return {"concurrency": self.concurrency, "requests": len(self.results), "ok": len(ok),
                "failed": len(self.results) - len(ok), "capped": sum(r.capped for r in ok),
                "wall_s": self.wall_s, "completion_tokens": tokens,
                "tokens_per_s": tokens / self.wall_s if self.wall_s > 0 else 0.0,
                "stream_tok_s": median(r.decode_tokens_per_s for r in ok),
                "ttft_p50_s": percentile(ttfts, 50), "ttft_p95_s": percentile(ttfts, 95),
                "peer_drafted": sum(r.peer_drafted for r in ok), "peer_accepted": sum(r.peer_accepted for r in ok),
                "errors": sorted({(r.error or "")[:120] for r in self.results if not r.ok})}


def chat_payload(prompt: str, max_tokens: int, model: str | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A greedy streaming chat body asking for usage in the stream; no ignore_eos."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    if model is not None:
        body["model"] = model
    body.update(extra or {})
    return body


async def stream_chat(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> ChatResult:
    """POST one streaming chat request and read it to the end; ok when it ended (stop or cap) with usage."""
    start = time.perf_counter()
    first = None
    usage = finish = None
    drafted = accepted = 0
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode("utf-8", "replace")[:300]
                return ChatResult(False, None, None, 0, None, f"HTTP {response.status_code}: {body}")
            async for event in sse_events(response.aiter_lines()):
                if event is None:
                    break
                if event.get("usage"):
                    usage = event["usage"].get("completion_tokens", usage)
                timings = event.get("timings") or {}
                drafted = int(timings.get("draft_n", drafted) or 0)
                accepted = int(timings.get("draft_n_accepted", accepted) or 0)
                text, reason = _chunk_text(event)
                finish = reason or finish
                if text and first is None:
                    first = time.perf_counter()
        end = time.perf_counter()
    except (httpx.HTTPError, ValueError, OSError) as e:
        return ChatResult(False, None, None, 0, finish, f"{type(e).__name__}: {e}")
    ttft = None if first is None else first - start
    decode = None if first is None else end - first
    if usage is None or finish not in ("stop", "length"):
        return ChatResult(False, ttft, decode, usage or 0, finish,
                          f"unfinished stream: finish_reason {finish}, usage {usage}")
    return ChatResult(True, ttft, decode, usage, finish, None, drafted, accepted)


async def run_chat_load(base_url: str, prompts: Sequence[str], concurrency: int, max_tokens: int = MAX_TOKENS,
                        model: str | None = None, extra_body: dict[str, Any] | None = None,
                        timeout_s: float = 900.0) -> ChatLoad:
    """`concurrency` clients take the prompts in order until none is left; every request's result."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    queue = iter(enumerate(prompts))       # shared: each client takes the next prompt

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits) as client:
        async def one_client() -> list[tuple[int, ChatResult]]:
            out = []
            for i, prompt in queue:
                out.append((i, await stream_chat(client, url, chat_payload(prompt, max_tokens, model, extra_body))))
            return out

        start = time.perf_counter()
        per_client = await asyncio.gather(*(one_client() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ordered = sorted((pair for rs in per_client for pair in rs), key=lambda pair: pair[0])
    return ChatLoad(concurrency, wall, tuple(r for _, r in ordered))
