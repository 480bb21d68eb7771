"""Accounting for `haltwise stress`: one outcome per request, /metrics parsing, the report and its invariants.

Outcomes (every request gets exactly one):
    completed/<termination reason>   200 and the generation ended (eos, max_tokens, stop_string, timeout, ...)
    rejected/4xx | rejected/429 | rejected/503   an OpenAI-shaped refusal (503/429 carry Retry-After)
    cancelled_by_client              we disconnected before the answer was complete
    error/5xx                        any other 5xx (500, or 503 that is not an admission refusal)
    error/stream                     a stream that ended in an error event
    error/transport                  no (complete) HTTP answer: connection error, client time-out, bad SSE
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from haltwise.bench.common import percentile

KINDS = ("valid", "invalid", "oversize")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Result:
    """One request as the client saw it."""

    kind: str                      # valid | invalid | oversize (what we meant to send)
    outcome: str                   # see the module docstring
    status: int                    # HTTP status, 0 when none arrived
    stream: bool
    ttft_s: float | None = None    # streams: request sent -> first text
    latency_s: float | None = None  # request sent -> answer complete
    completion_tokens: int = 0
    code: str | None = None        # OpenAI error code, when there was one
    retry_after: bool = False      # the refusal carried Retry-After


def outcome_for_status(status: int, code: str | None, retry_after: bool) -> str:
    """The outcome of a non-200 answer."""
    if status == 429:
        return "rejected/429"
    if status == 503 and code in ("overloaded", "cancelled") and retry_after:
        return "rejected/503"
    if status >= 500:
        return "error/5xx"
    return "rejected/4xx"


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(name, sorted labels): value}."""
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def metric_by_label(samples: dict, name: str, label: str) -> dict[str, float]:
    """{label value: sample} for every sample of `name` (summed over other labels)."""
    out: Counter[str] = Counter()
    for (n, labels), v in samples.items():
        if n == name:
            out[dict(labels).get(label, "")] += v
    return dict(out)


def gauge(samples: dict, name: str) -> float:
    return samples.get((name, ()), 0.0)


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


def _quantiles(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in (50, 95, 99)}


def build_report(results: list[Result], issued: int, wall_s: float, config: dict[str, Any],
                 before: dict, after: dict, drained: bool) -> dict[str, Any]:
    """The stress report (JSON-ready) with its invariant checks under "invariants"."""
    by_outcome = Counter(r.outcome for r in results)
    by_kind = {k: dict(Counter(r.outcome for r in results if r.kind == k)) for k in KINDS}
    done = [r for r in results if r.outcome.startswith("completed/")]
    tokens = sum(r.completion_tokens for r in done)
    valid_5xx = sum(1 for r in results if r.kind == "valid" and r.outcome.startswith("error/"))
    any_500 = sum(1 for r in results if r.status == 500)
    refusals_without_retry_after = sum(1 for r in results if r.status in (429, 503) and not r.retry_after)
    server = {
        "finished_by_termination": _delta(metric_by_label(after, "haltwise_requests_finished_total", "termination_reason"),
                                          metric_by_label(before, "haltwise_requests_finished_total", "termination_reason")),
        "rejected_by_reason": _delta(metric_by_label(after, "haltwise_requests_rejected_total", "reason"),
                                     metric_by_label(before, "haltwise_requests_rejected_total", "reason")),
        "preemptions": gauge(after, "haltwise_preemptions_total") - gauge(before, "haltwise_preemptions_total"),
        "kv_blocks_used_after_drain": gauge(after, "haltwise_kv_blocks_used"),
        "kv_blocks_total": gauge(after, "haltwise_kv_blocks_total"),
        "requests_running_after_drain": gauge(after, "haltwise_requests_running"),
        "requests_waiting_after_drain": gauge(after, "haltwise_requests_waiting"),
        "breaker_state_after_drain": gauge(after, "haltwise_engine_breaker_state"),
        "drained": drained,
    }
    invariants = {
        "no_5xx_for_valid_requests": valid_5xx == 0,
        "no_500_at_all": any_500 == 0,
        "refusals_carry_retry_after": refusals_without_retry_after == 0,
        "no_kv_blocks_leaked": server["kv_blocks_used_after_drain"] == 0,
        "idle_after_drain": server["requests_running_after_drain"] == 0 and server["requests_waiting_after_drain"] == 0,
        "every_request_accounted_once": sum(by_outcome.values()) == issued == len(results),
    }
    return {
        "config": config,
        "requests": {"issued": issued, "accounted": sum(by_outcome.values()), "by_outcome": dict(sorted(by_outcome.items())),
                     "by_kind": by_kind, "streaming": sum(r.stream for r in results)},
        "latency_s": {"ttft": _quantiles([r.ttft_s for r in done if r.ttft_s is not None]),
                      "e2e": _quantiles([r.latency_s for r in done if r.latency_s is not None])},
        "throughput": {"wall_s": wall_s, "completion_tokens": tokens,
                       "tokens_per_s": tokens / wall_s if wall_s else 0.0,
                       "completed_per_s": len(done) / wall_s if wall_s else 0.0},
        "failures": {"5xx_or_error_for_valid": valid_5xx, "status_500": any_500,
                     "refusals_without_retry_after": refusals_without_retry_after},
        "server": server,
        "invariants": invariants,
        "ok": all(invariants.values()),
        "errors_sample": [asdict(r) for r in results if r.outcome.startswith("error/")][:10],
    }


def format_report(report: dict[str, Any]) -> str:
    """Human-readable lines of the report."""
    req, lat, thr, srv = report["requests"], report["latency_s"], report["throughput"], report["server"]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.0f}ms"

    lines = [f"haltwise stress: {req['issued']} requests ({req['streaming']} streaming) in {thr['wall_s']:.1f}s"]
    lines += [f"  {name:<28} {count}" for name, count in req["by_outcome"].items()]
    lines.append(f"  {'sum':<28} {req['accounted']}  (issued {req['issued']})")
    for kind, outcomes in req["by_kind"].items():
        lines.append(f"  kind {kind:<8} " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    for name in ("ttft", "e2e"):
        q = lat[name]
        lines.append(f"  {name:<5} p50 {ms(q['p50'])}  p95 {ms(q['p95'])}  p99 {ms(q['p99'])}")
    lines.append(f"  throughput {thr['tokens_per_s']:.1f} tokens/s, {thr['completed_per_s']:.2f} completed requests/s")
    lines.append(f"  server: preemptions {srv['preemptions']:g}, finished {srv['finished_by_termination']}, "
                 f"rejected {srv['rejected_by_reason']}")
    lines.append(f"  after drain: kv blocks used {srv['kv_blocks_used_after_drain']:g}/{srv['kv_blocks_total']:g}, "
                 f"running {srv['requests_running_after_drain']:g}, waiting {srv['requests_waiting_after_drain']:g}, "
                 f"breaker {srv['breaker_state_after_drain']:g}")
    lines += [f"  [{'ok' if v else 'FAIL'}] {k}" for k, v in report["invariants"].items()]
    return "\n".join(lines)
