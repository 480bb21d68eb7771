"""Accounting for `haltwise stress`: one outcome per request, /metrics parsing, the report and its invariants.

Outcomes (every request gets exactly one):
    completed/<termination reason>   200 and the generation ended (eos, max_tokens, stop_string, timeout, ...)
    rejected/4xx | rejected/429 | rejected/503   an OpenAI-shaped refusal (503/429 carry Retry-After)
    cancelled_by_client              we disconnected before the answer was complete
    error/5xx                        any other 5xx (500, or 503 that is not an admission refusal)
    error/stream                     a stream that ended in an error event
    error/transport                  no (complete) HTTP answer: connection error, client time-out, bad SSE
    error/malformed                  a 200 whose body or events are not a completion (missing fields, not JSON)

The invariants (each can fail, and tests/haltwise_bench/test_stress.py shows each failing on a fake server):
    every valid request served or refused with 503/429 + Retry-After, never a 5xx, and at most
    `max_refused_share` of them refused (a server that refuses everything fails); every invalid
    request a 4xx; every oversize prompt a 4xx with code context_length_exceeded; the server's own
    finished/rejected counter deltas agree with the client's outcomes (a request the client gave up
    on may land in either); no server-side "cancelled" beyond the client's own disconnects; every
    metric read present (a missing gauge is a failure, never 0); after the drain: no KV block used,
    nothing running or waiting, breaker closed; completed answers honour max_tokens, their deadline
    (latency <= timeout + slack) and hold none of their stop strings.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from haltwise_bench.common import percentile

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
    max_tokens: int | None = None  # what the request asked for (valid requests)
    timeout_s: float | None = None  # the request's `timeout` (server-side deadline), if any
    stop_leaked: bool = False      # a completed text holds one of the request's stop strings


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


GAUGES = ("haltwise_requests_running", "haltwise_requests_waiting", "haltwise_kv_blocks_used",
          "haltwise_kv_blocks_total", "haltwise_engine_breaker_state", "haltwise_preemptions_total")
COUNTERS = ("haltwise_requests_finished_total", "haltwise_requests_rejected_total")  # absent until first use


def gauge(samples: dict, name: str) -> float | None:
    """A label-less sample; None when the server did not report it (never read as 0)."""
    return samples.get((name, ()))


def missing_metrics(samples: dict, counters_needed: bool) -> list[str]:
    names = {n for n, _ in samples}
    return [n for n in GAUGES + (COUNTERS if counters_needed else ()) if n not in names]


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


def _quantiles(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in (50, 95, 99)}


REFUSED = ("rejected/429", "rejected/503")
SLACK = ("cancelled_by_client", "error/transport", "error/stream", "error/malformed")  # may land anywhere


def build_report(results: list[Result], issued: int, wall_s: float, config: dict[str, Any],
                 before: dict, after: dict, drained: bool, max_refused_share: float = 0.5,
                 deadline_slack_s: float = 5.0) -> dict[str, Any]:
    """The stress report (JSON-ready) with its invariant checks under "invariants"."""
    by_outcome = Counter(r.outcome for r in results)
    by_kind = {k: dict(Counter(r.outcome for r in results if r.kind == k)) for k in KINDS}
    done = [r for r in results if r.outcome.startswith("completed/")]
    tokens = sum(r.completion_tokens for r in done)
    valid = [r for r in results if r.kind == "valid"]
    valid_5xx = sum(1 for r in valid if r.outcome.startswith("error/"))
    any_500 = sum(1 for r in results if r.status == 500)
    refusals_without_retry_after = sum(1 for r in results if r.status in (429, 503) and not r.retry_after)
    refused_valid = sum(1 for r in valid if r.outcome.startswith("rejected/"))
    settled_valid = sum(1 for r in valid if r.outcome not in SLACK)
    finished = _delta(metric_by_label(after, "haltwise_requests_finished_total", "termination_reason"),
                      metric_by_label(before, "haltwise_requests_finished_total", "termination_reason"))
    rejected = _delta(metric_by_label(after, "haltwise_requests_rejected_total", "reason"),
                      metric_by_label(before, "haltwise_requests_rejected_total", "reason"))
    missing = sorted(set(missing_metrics(before, False)) | set(missing_metrics(after, bool(results))))
    server = {
        "finished_by_termination": finished,
        "rejected_by_reason": rejected,
        "preemptions": _minus(gauge(after, "haltwise_preemptions_total"), gauge(before, "haltwise_preemptions_total")),
        "kv_blocks_used_after_drain": gauge(after, "haltwise_kv_blocks_used"),
        "kv_blocks_total": gauge(after, "haltwise_kv_blocks_total"),
        "requests_running_after_drain": gauge(after, "haltwise_requests_running"),
        "requests_waiting_after_drain": gauge(after, "haltwise_requests_waiting"),
        "breaker_state_after_drain": gauge(after, "haltwise_engine_breaker_state"),
        "missing_metrics": missing,
        "drained": drained,
    }
    checks = {
        "over_max_tokens": [r for r in done if r.max_tokens is not None and r.completion_tokens > r.max_tokens],
        "past_deadline": [r for r in done if r.timeout_s is not None and r.latency_s is not None
                          and r.latency_s > r.timeout_s + deadline_slack_s],
        "stop_string_leaked": [r for r in done if r.stop_leaked],
        "invalid_not_4xx": [r for r in results if r.kind == "invalid"
                            and r.outcome not in ("rejected/4xx", "cancelled_by_client")],
        "oversize_not_context_length_exceeded": [
            r for r in results if r.kind == "oversize" and r.outcome != "cancelled_by_client"
            and not (r.outcome == "rejected/4xx" and r.code == "context_length_exceeded")],
    }
    invariants = {
        "no_5xx_for_valid_requests": valid_5xx == 0,
        "no_500_at_all": any_500 == 0,
        "refusals_carry_retry_after": refusals_without_retry_after == 0,
        "valid_requests_served": bool(valid) and refused_valid <= max_refused_share * max(settled_valid, 1)
        and any(r.outcome.startswith("completed/") for r in valid),
        "invalid_requests_get_4xx": not checks["invalid_not_4xx"],
        "oversize_gets_context_length_exceeded": not checks["oversize_not_context_length_exceeded"],
        "max_tokens_honoured": not checks["over_max_tokens"],
        "deadlines_honoured": not checks["past_deadline"],
        "no_stop_string_leaked": not checks["stop_string_leaked"],
        "every_metric_present": not missing,
        "no_kv_blocks_leaked": server["kv_blocks_used_after_drain"] == 0,
        "idle_after_drain": server["requests_running_after_drain"] == 0 and server["requests_waiting_after_drain"] == 0,
        "breaker_closed_after_drain": server["breaker_state_after_drain"] == 0,
        "no_server_cancels_beyond_client_disconnects":
            finished.get("cancelled", 0) <= by_outcome["cancelled_by_client"],
        "server_counters_match_client": counters_agree(by_outcome, finished, rejected, issued),
        "every_request_accounted_once": sum(by_outcome.values()) == issued == len(results),
    }
    return {
        "config": config,
        "requests": {"issued": issued, "accounted": sum(by_outcome.values()),
                     "by_outcome": dict(sorted(by_outcome.items())),
                     "by_kind": by_kind, "streaming": sum(r.stream for r in results),
                     "valid_refused": refused_valid, "valid_settled": settled_valid,
                     "valid_4xx_codes": dict(Counter(str(r.code) for r in valid if r.outcome == "rejected/4xx"))},
        "latency_s": {"ttft": _quantiles([r.ttft_s for r in done if r.ttft_s is not None]),
                      "e2e": _quantiles([r.latency_s for r in done if r.latency_s is not None])},
        "throughput": {"wall_s": wall_s, "completion_tokens": tokens,
                       "tokens_per_s": tokens / wall_s if wall_s else 0.0,
                       "completed_per_s": len(done) / wall_s if wall_s else 0.0},
        "failures": {"5xx_or_error_for_valid": valid_5xx, "status_500": any_500,
                     "refusals_without_retry_after": refusals_without_retry_after,
                     **{k: len(v) for k, v in checks.items()}},
        "server": server,
        "invariants": invariants,
        "ok": all(invariants.values()),
        "errors_sample": [asdict(r) for r in results if r.outcome.startswith("error/")][:10],
        "violations_sample": {k: [asdict(r) for r in v[:3]] for k, v in checks.items() if v},
    }


def counters_agree(by_outcome: Counter, finished: dict[str, float], rejected: dict[str, float], issued: int) -> bool:
    """The server's counter deltas against the client's outcomes.

    Per termination reason r: completed/r <= finished[r] <= completed/r + slack; refusals (4xx, 429,
    503, other 5xx) <= rejected total <= refusals + slack; where slack counts the requests whose
    fate the client could not see (it disconnected, or the answer broke off), plus server-side
    "cancelled" only for those. Nothing may be counted for requests never sent.
    """
    slack = sum(by_outcome[o] for o in SLACK)
    completed = {o.split("/", 1)[1]: n for o, n in by_outcome.items() if o.startswith("completed/")}
    for reason in set(completed) | set(finished):
        if reason == "cancelled":
            continue
        if not completed.get(reason, 0) <= finished.get(reason, 0) <= completed.get(reason, 0) + slack:
            return False
    refusals = sum(n for o, n in by_outcome.items() if o.startswith("rejected/") or o == "error/5xx")
    total_rejected = sum(rejected.values())
    if not refusals <= total_rejected <= refusals + slack:
        return False
    return sum(finished.values()) + total_rejected <= issued


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
    lines.append(f"  server: preemptions {_g(srv['preemptions'])}, finished {srv['finished_by_termination']}, "
                 f"rejected {srv['rejected_by_reason']}")
    lines.append(f"  after drain: kv blocks used {_g(srv['kv_blocks_used_after_drain'])}/{_g(srv['kv_blocks_total'])}, "
                 f"running {_g(srv['requests_running_after_drain'])}, "
                 f"waiting {_g(srv['requests_waiting_after_drain'])}, "
                 f"breaker {_g(srv['breaker_state_after_drain'])}")
    if srv["missing_metrics"]:
        lines.append(f"  missing metrics: {', '.join(srv['missing_metrics'])}")
    lines.append(f"  valid requests refused: {req['valid_refused']} of {req['valid_settled']} answered")
    lines += [f"  [{'ok' if v else 'FAIL'}] {k}" for k, v in report["invariants"].items()]
    return "\n".join(lines)


def _g(v: float | None) -> str:
    return "MISSING" if v is None else f"{v:g}"
