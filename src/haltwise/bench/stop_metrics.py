"""Pure metrics for the stop-strategy evaluation (eval_stops.py): no model, no engine.

Definitions, per generation (one prompt under one strategy):
  ending       "content" when it ended by eos, a stop string/preset or a stop token (the text ended
               by itself or by its expected structure); "loop" when the repetition detector cut it;
               "limit" when max_tokens or the context window cut it; "deadline" when its deadline
               passed first.
  generated    tokens returned (after stop truncation) -- what the client paid for.
  reference    per prompt, the content end found by the full layered stack without deadlines
               (strategy d) on the same greedy prompt: its number of output tokens when it ended by
               content or loop; None when it hit a limit (then no content end is known and every
               token counts as useful).  Greedy decoding makes every strategy's output a prefix of
               the same token sequence, so one reference serves all strategies.
  useful       min(generated, reference), or generated when reference is None.
  runaway      ended by a token limit (max_tokens / context window) without a content end: the
               generation ran until the hard gate stopped it.  Deadline cuts are counted apart.
  json_ok      (JSON prompts only) the text from its first "{" or "[" to its end, a trailing code
               fence removed, parses with json.loads -- what a client extracting the JSON would get.
Per strategy:
  completeness       share of generations with ending "content"
  json_parse_rate    share of JSON prompts with json_ok
  latency p50 / p95  seconds from arrival to finish (all prompts submitted at once)
  token_efficiency   sum(useful) / sum(generated)
  runaways           number of generations with ending "limit"
  deadline_cuts      number of generations with ending "deadline"
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from haltwise.bench.common import median, percentile

CONTENT_REASONS = frozenset({"eos", "stop_string", "stop_token"})
LOOP_REASONS = frozenset({"repetition"})
LIMIT_REASONS = frozenset({"max_tokens", "context_limit"})
DEADLINE_REASONS = frozenset({"timeout"})


@dataclass(frozen=True)
class Generation:
    """One prompt's result under one strategy (plain data, JSON-ready via asdict)."""

    prompt_id: str
    kind: str
    reason: str            # Termination.reason value
    generated: int         # output tokens returned
    latency_s: float
    text: str


def ending(reason: str) -> str:
    """'content', 'loop', 'limit' or 'deadline' (anything else, e.g. error or cancelled, is 'other')."""
    if reason in CONTENT_REASONS:
        return "content"
    if reason in LOOP_REASONS:
        return "loop"
    if reason in LIMIT_REASONS:
        return "limit"
    if reason in DEADLINE_REASONS:
        return "deadline"
    return "other"


def json_ok(text: str) -> bool:
    """Does the text from its first '{' or '[' to the end (minus a closing ``` fence) parse as JSON?"""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return False
    body = text[min(starts):].strip()
    if body.endswith("```"):
        body = body[:-3].rstrip()
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def reference_ends(reference: Sequence[Generation]) -> dict[str, int | None]:
    """prompt id -> reference content end in tokens (None when the reference hit a limit)."""
    return {g.prompt_id: g.generated if ending(g.reason) in ("content", "loop") else None for g in reference}


def useful_tokens(g: Generation, reference_end: int | None) -> int:
    return g.generated if reference_end is None else min(g.generated, reference_end)


def summarize(strategy: str, gens: Sequence[Generation], ref: dict[str, int | None]) -> dict[str, Any]:
    """The per-strategy record (see the module docstring for each field)."""
    n = len(gens)
    endings = [ending(g.reason) for g in gens]
    generated = sum(g.generated for g in gens)
    useful = sum(useful_tokens(g, ref.get(g.prompt_id)) for g in gens)
    json_gens = [g for g in gens if g.kind == "json"]
    latencies = [g.latency_s for g in gens]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(g.kind for g in gens):
        ks = [g for g in gens if g.kind == kind]
        by_kind[kind] = {"prompts": len(ks),
                         "completeness": sum(ending(g.reason) == "content" for g in ks) / len(ks),
                         "runaways": sum(ending(g.reason) == "limit" for g in ks),
                         "mean_generated_tokens": sum(g.generated for g in ks) / len(ks)}
    reasons: dict[str, int] = {}
    for g in gens:
        reasons[g.reason] = reasons.get(g.reason, 0) + 1
    return {
        "strategy": strategy,
        "prompts": n,
        "completeness": endings.count("content") / n if n else None,
        "loop_cut_share": endings.count("loop") / n if n else None,
        "json_prompts": len(json_gens),
        "json_parse_rate": sum(json_ok(g.text) for g in json_gens) / len(json_gens) if json_gens else None,
        "latency_p50_s": median(latencies),
        "latency_p95_s": percentile(latencies, 95),
        "generated_tokens": generated,
        "useful_tokens": useful,
        "token_efficiency": useful / generated if generated else None,
        "runaways": endings.count("limit"),
        "deadline_cuts": endings.count("deadline"),
        "reasons": reasons,
        "by_kind": by_kind,
    }


def format_table(summaries: Sequence[dict[str, Any]], labels: dict[str, str]) -> str:
    head = (f"{'strategy':<34} {'complete':>8} {'json ok':>7} {'lat p50':>8} {'lat p95':>8} "
            f"{'gen tok':>8} {'useful':>7} {'effic.':>6} {'runaway':>7} {'deadline':>8}")
    lines = [head, "-" * len(head)]
    for s in summaries:
        jp = "-" if s["json_parse_rate"] is None else f"{s['json_parse_rate']:.0%}"
        lines.append(f"{labels.get(s['strategy'], s['strategy']):<34} {s['completeness']:>8.0%} {jp:>7} "
                     f"{s['latency_p50_s']:>8.2f} {s['latency_p95_s']:>8.2f} {s['generated_tokens']:>8} "
                     f"{s['useful_tokens']:>7} {s['token_efficiency']:>6.2f} {s['runaways']:>7} {s['deadline_cuts']:>8}")
    return "\n".join(lines)
