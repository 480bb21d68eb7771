"""Pure metrics for the stop-strategy evaluation (eval_stops.py): no model, no engine.

The yardstick is independent of the strategies it judges. Per prompt:
  reference text   strategy b's output (greedy, eos honoured, no stop strings, no loop detection):
                   the longest answer the model gives by itself. Every other strategy's tokens must
                   be a prefix of the longest greedy token sequence (a's, which also ignores eos);
                   this is checked, and each divergence is reported (there the generation is judged
                   by the checker on its own text).
  content end      the prompt's checker (bench/content_checks.py, stored with the prompt set) run on
                   the reference text: the character offset where the answer asked for is complete,
                   and the number of reference tokens it takes (None: the answer never completes,
                   e.g. the loop prompts, or JSON that never closes).
Per generation (one prompt under one strategy):
  ending       "content" (eos, stop string/preset, stop token), "loop" (repetition detector),
               "limit" (max_tokens / window), "deadline" (timeout), else "other"
  complete     the content end is known and the text reaches it (holds the whole answer)
  false cut    the content end is known, the text stops short of it, and the strategy's own stop
               (a content or loop ending) cut it -- not a token limit or the deadline
  truncated    the content end is known and the text stops short of it, for any reason
  useful       tokens up to the content end: min(generated, content end tokens); 0 when the answer
               never completes (tokens spent on it bought nothing complete)
  runaway      ended by a token limit (max_tokens / context window)
  json_ok      (JSON prompts) a JSON value decodes from the text's first '{' or '[' (trailing
               prose allowed: what a client extracting the JSON gets)
  json_valid   (JSON prompts whose check carries a "schema") that value also validates against it
Per strategy (over all prompts; completeness and cuts over the prompts whose content end is known):
  completeness, false_cuts, truncated (and truncation_rate = truncated / judged), runaways,
  deadline_cuts, json_parse_rate, json_valid_rate (over the JSON prompts with a schema),
  token_efficiency = sum(useful) / sum(generated), latency p50/p95 (missing latencies are counted
  in latency_missing, never read as 0), content_ending_share (the old "complete": ended by
  eos/stop, whatever the text says), divergences.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from haltwise_bench.common import median, percentile
from haltwise_bench.content_checks import content_end, json_value_ok, json_value_valid

CONTENT_REASONS = frozenset({"eos", "stop_string", "stop_token"})
LOOP_REASONS = frozenset({"repetition"})
LIMIT_REASONS = frozenset({"max_tokens", "context_limit"})
DEADLINE_REASONS = frozenset({"timeout"})


@dataclass(frozen=True)
class Generation:
    """One prompt's result under one strategy (plain data, JSON-ready via asdict)."""

    prompt_id: str
    kind: str
    reason: str                    # Termination.reason value
    generated: int                 # output tokens returned
    latency_s: float | None        # None when the engine reported none
    text: str
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContentEnd:
    """Where one prompt's answer is complete in its reference text."""

    chars: int | None              # offset in the reference text; None = never complete
    tokens: int | None             # reference tokens needed to reach it


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
    return json_value_ok(text)


def reference_content_ends(reference: Sequence[Generation], checks: dict[str, dict[str, Any]],
                           char_len_of_prefix: Callable[[Generation, int], int]) -> dict[str, ContentEnd]:
    """prompt id -> its content end in the reference text (chars, and tokens via char_len_of_prefix(g, k):
    the length of the text of g's first k tokens)."""
    out = {}
    for g in reference:
        chars = content_end(checks[g.prompt_id], g.text, g.reason == "eos")
        tokens = None
        if chars is not None:
            tokens = next((k for k in range(1, g.generated + 1) if char_len_of_prefix(g, k) >= chars), g.generated)
        out[g.prompt_id] = ContentEnd(chars, tokens)
    return out


def divergences(gens: dict[str, Sequence[Generation]]) -> list[dict[str, Any]]:
    """Generations whose tokens are not a prefix of the prompt's longest greedy sequence."""
    longest: dict[str, tuple[int, ...]] = {}
    for gs in gens.values():
        for g in gs:
            if len(g.token_ids) > len(longest.get(g.prompt_id, ())):
                longest[g.prompt_id] = g.token_ids
    out = []
    for strategy, gs in gens.items():
        for g in gs:
            ref = longest[g.prompt_id]
            if tuple(ref[:len(g.token_ids)]) != tuple(g.token_ids):
                at = next(i for i, (x, y) in enumerate(zip(g.token_ids, ref)) if x != y)
                out.append({"strategy": strategy, "prompt_id": g.prompt_id, "first_different_token": at})
    return out


def judge(g: Generation, end: ContentEnd, check: dict[str, Any], diverged: bool) -> dict[str, Any]:
    """One generation against its prompt's content end."""
    if diverged:  # not a prefix of the reference: only its own text can say
        own = content_end(check, g.text, g.reason == "eos")
        known = own is not None or end.chars is not None
        complete = own is not None
        useful = g.generated if complete else 0
    else:
        known = end.chars is not None
        complete = known and len(g.text) >= end.chars
        useful = min(g.generated, end.tokens or 0) if known else 0
    short = known and not complete
    return {"known": known, "complete": complete, "truncated": short,
            "false_cut": short and ending(g.reason) in ("content", "loop"), "useful": useful}


def summarize(strategy: str, gens: Sequence[Generation], ends: dict[str, ContentEnd],
              checks: dict[str, dict[str, Any]], diverged: set[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    """The per-strategy record (see the module docstring for each field)."""
    verdicts = [judge(g, ends[g.prompt_id], checks[g.prompt_id], (strategy, g.prompt_id) in diverged) for g in gens]
    generated = sum(g.generated for g in gens)
    useful = sum(v["useful"] for v in verdicts)
    json_gens = [g for g in gens if g.kind == "json"]
    schema_gens = [(g, checks[g.prompt_id]["schema"]) for g in json_gens if "schema" in checks[g.prompt_id]]
    latencies = [g.latency_s for g in gens if g.latency_s is not None]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(g.kind for g in gens):
        ks = [(g, v) for g, v in zip(gens, verdicts) if g.kind == kind]
        known = [v for _, v in ks if v["known"]]
        by_kind[kind] = {"prompts": len(ks), "judged": len(known),
                         "completeness": sum(v["complete"] for v in known) / len(known) if known else None,
                         "false_cuts": sum(v["false_cut"] for v in known),
                         "runaways": sum(ending(g.reason) == "limit" for g, _ in ks),
                         "mean_generated_tokens": sum(g.generated for g, _ in ks) / len(ks)}
    reasons: dict[str, int] = {}
    for g in gens:
        reasons[g.reason] = reasons.get(g.reason, 0) + 1
    known = [v for v in verdicts if v["known"]]
    endings = [ending(g.reason) for g in gens]
    n = len(gens)
    return {
        "strategy": strategy,
        "prompts": n,
        "judged_prompts": len(known),
        "completeness": sum(v["complete"] for v in known) / len(known) if known else None,
        "false_cuts": sum(v["false_cut"] for v in known),
        "truncated": sum(v["truncated"] for v in known),
        "truncation_rate": sum(v["truncated"] for v in known) / len(known) if known else None,
        "content_ending_share": endings.count("content") / n if n else None,
        "loop_cut_share": endings.count("loop") / n if n else None,
        "json_prompts": len(json_gens),
        "json_parse_rate": sum(json_ok(g.text) for g in json_gens) / len(json_gens) if json_gens else None,
        "json_valid_rate": (sum(json_value_valid(g.text, sc) for g, sc in schema_gens) / len(schema_gens)
                            if schema_gens else None),
        "latency_p50_s": median(latencies) if latencies else None,
        "latency_p95_s": percentile(latencies, 95) if latencies else None,
        "latency_missing": n - len(latencies),
        "generated_tokens": generated,
        "useful_tokens": useful,
        "token_efficiency": useful / generated if generated else None,
        "runaways": endings.count("limit"),
        "deadline_cuts": endings.count("deadline"),
        "divergences": sum(1 for s, _ in diverged if s == strategy),
        "reasons": reasons,
        "by_kind": by_kind,
    }


def subset_cuts(strategy: str, gens: Sequence[Generation], ends: dict[str, ContentEnd],
                checks: dict[str, dict[str, Any]], diverged: set[tuple[str, str]], prompt_ids: set[str]
                ) -> dict[str, Any]:
    """False cuts and completeness of one strategy on a subset of the prompts (e.g. those with word stops)."""
    s = summarize(strategy, [g for g in gens if g.prompt_id in prompt_ids], ends, checks, diverged)
    judged = s["judged_prompts"]
    cut_ids = [g.prompt_id for g in gens if g.prompt_id in prompt_ids
               and judge(g, ends[g.prompt_id], checks[g.prompt_id], (strategy, g.prompt_id) in diverged)["false_cut"]]
    return {"strategy": strategy, "prompts": s["prompts"], "judged_prompts": judged, "false_cuts": s["false_cuts"],
            "false_cut_rate": s["false_cuts"] / judged if judged else None, "completeness": s["completeness"],
            "runaways": s["runaways"], "false_cut_prompts": cut_ids}


def format_word_table(rows: Sequence[dict[str, Any]], labels: dict[str, str]) -> str:
    head = f"{'strategy':<34} {'prompts':>7} {'judged':>6} {'false cut':>9} {'rate':>5} {'complete':>8}  cut prompts"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{labels.get(r['strategy'], r['strategy']):<34} {r['prompts']:>7} {r['judged_prompts']:>6} "
                     f"{r['false_cuts']:>9} {_pct(r['false_cut_rate']):>5} {_pct(r['completeness']):>8}  "
                     f"{', '.join(r['false_cut_prompts']) or '-'}")
    return "\n".join(lines)


def format_table(summaries: Sequence[dict[str, Any]], labels: dict[str, str]) -> str:
    head = (f"{'strategy':<34} {'complete':>8} {'trunc.':>6} {'false cut':>9} {'json ok':>7} {'valid':>5} "
            f"{'lat p50':>8} {'lat p95':>8} {'gen tok':>8} {'useful':>7} {'effic.':>6} {'runaway':>7} {'deadline':>8}")
    lines = [head, "-" * len(head)]
    for s in summaries:
        lines.append(f"{labels.get(s['strategy'], s['strategy']):<34} {_pct(s['completeness']):>8} "
                     f"{_pct(s['truncation_rate']):>6} {s['false_cuts']:>9} {_pct(s['json_parse_rate']):>7} "
                     f"{_pct(s['json_valid_rate']):>5} {_num(s['latency_p50_s']):>8} "
                     f"{_num(s['latency_p95_s']):>8} {s['generated_tokens']:>8} {s['useful_tokens']:>7} "
                     f"{_num(s['token_efficiency']):>6} {s['runaways']:>7} {s['deadline_cuts']:>8}")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
