"""Per engine request: feed metrics as updates arrive and write one JSON log line when it ends.

The log line goes to the `haltwise.requests` logger. Prompt and output text are included only when
the server runs with log_content=True (`--log-content`); by default no user text is ever logged:
matched stop strings and text excerpts in termination details are fingerprinted (log_redaction.py).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from haltwise.outputs import RequestOutput
from haltwise.server.log_redaction import redact_choice
from haltwise.server.metrics import ServerMetrics
from haltwise.server.tracing import begin_trace

request_log = logging.getLogger("haltwise.requests")


class RequestRecorder:
    """Observes the updates of one engine request; `finish` or `cancelled` is called exactly once."""

    def __init__(self, metrics: ServerMetrics, request_id: str, log_content: bool = False,
                 prompt_text: str | None = None):
        self.metrics = metrics
        self.request_id = request_id
        self.log_content = log_content
        self.prompt_text = prompt_text
        self.arrival = time.monotonic()
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.num_prompt_tokens = 0
        self.num_output_tokens = 0  # across the n choices
        self.done = False
        self.trace = begin_trace(request_id)   # None unless --otlp-traces-endpoint (tracing.py)

    def observe(self, out: RequestOutput) -> None:
        """Record one update: time to first token, and inter-token gaps spread over the new tokens."""
        now = time.monotonic()
        self.num_prompt_tokens = len(out.prompt_token_ids)
        new_tokens = sum(len(o.delta_token_ids) for o in out.outputs)
        if new_tokens == 0:
            return
        if self.first_token_at is None:
            self.first_token_at = now
            new_tokens -= 1
        elif self.last_token_at is not None:
            gap = (now - self.last_token_at) / new_tokens
            for _ in range(new_tokens):
                self.metrics.itl.observe(gap)
        self.last_token_at = now

    def finish(self, out: RequestOutput) -> None:
        """The final update: every output has its termination."""
        if self.done:
            return
        self.done = True
        now = time.monotonic()
        ttft = out.first_token_latency if out.first_token_latency is not None else (
            self.first_token_at - self.arrival if self.first_token_at is not None else None)
        latency = out.latency if out.latency is not None else now - self.arrival
        self.num_output_tokens = sum(len(o.token_ids) for o in out.outputs)
        self.metrics.prompt_tokens.inc(len(out.prompt_token_ids))
        self.metrics.generation_tokens.inc(self.num_output_tokens)
        if ttft is not None:
            self.metrics.ttft.observe(ttft)
        self.metrics.e2e.observe(latency)
        choices = []
        for o in out.outputs:
            t = o.termination
            reason = t.reason.value if t is not None else "cancelled"
            self.metrics.finish(o.finish_reason, reason)
            choice: dict[str, Any] = {"index": o.index, "finish_reason": o.finish_reason,
                                      "stop_reason": o.stop_reason, "completion_tokens": len(o.token_ids)}
            if o.num_draft_tokens:   # speculative decoding (engine/speculation.py): drafts verified, accepted
                choice.update(draft_tokens=o.num_draft_tokens, accepted_draft_tokens=o.num_accepted_draft_tokens)
            choice.update(t.to_dict() if t is not None else {"reason": "cancelled"})
            if self.log_content:
                choice["output"] = o.text
            choices.append(choice if self.log_content else redact_choice(choice))
        if self.trace is not None:
            self.trace.end(choices, len(out.prompt_token_ids), self.num_output_tokens, out.queue_time, ttft, latency)
        self._write(ttft, latency, choices, out)

    def rejected(self) -> None:
        """The engine refused or failed the request with an error: no finish record, no log line."""
        self.done = True

    def cancelled(self, detail: str = "client disconnected") -> None:
        """The consumer stopped before the final update (client gone, or the server is closing)."""
        if self.done:
            return
        self.done = True
        self.metrics.finish(None, "cancelled")
        self.metrics.prompt_tokens.inc(self.num_prompt_tokens)
        ttft = self.first_token_at - self.arrival if self.first_token_at is not None else None
        choices = [{"reason": "cancelled", "layer": "system", "detail": detail}]
        if self.trace is not None:
            self.trace.end(choices, self.num_prompt_tokens, 0, None, ttft, time.monotonic() - self.arrival)
        self._write(ttft, time.monotonic() - self.arrival, choices, None)

    def _write(self, ttft: float | None, latency: float, choices: list[dict[str, Any]],
               out: RequestOutput | None) -> None:
        if not request_log.isEnabledFor(logging.INFO):
            return
        line: dict[str, Any] = {
            "event": "request_finished", "request_id": self.request_id,
            "prompt_tokens": self.num_prompt_tokens, "completion_tokens": self.num_output_tokens,
            "truncated_prompt_tokens": out.num_truncated_prompt_tokens if out else 0,
            "cached_prompt_tokens": out.num_cached_tokens if out else 0,
            "ttft_s": round(ttft, 6) if ttft is not None else None, "latency_s": round(latency, 6),
            "choices": choices,
        }
        if self.log_content and self.prompt_text is not None:
            line["prompt"] = self.prompt_text
        request_log.info(json.dumps(line, ensure_ascii=False))
