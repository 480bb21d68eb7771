"""`haltwise bench spec`: speculative decoding off vs on (prompt lookup, a draft model), same engine, same run.

One engine with the default flags (whatever other model options are given). Each prompt is a chat
request, greedy, --max-tokens new tokens; every round runs it with speculation off and with each K of
--speculative-tokens, alternating (the order flips every round). Speculation is exact, so off and on
produce the same tokens (checked: a mismatch is reported as an error). Reported per prompt set (echo:
edit this code, JSON rewrite, quote-and-answer; plain: ordinary chat): decode tok/s (tokens after the
first / time after the first), the ratio on / off, and the acceptance rate (accepted / drafted).

--draft-model NAME adds a setting where the draft model drafts (prompt lookup off), beside off and
each K; its row's acceptance is the draft model's. `--sets chat` runs six everyday chat prompts whose
answers end by themselves (raise --max-tokens so they do) -- the natural-chat figure.

--concurrency N submits each prompt N times at once (N sequences in every step, as N clients would):
tok/s is then the tokens all N requests decode after the last of them has its first token, over that time.
--max-batch compares speculative_max_batch values (drafts only in steps with at most that many decodes;
"none" = any number) for each K: at high concurrency it decides whether drafting pays.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from haltwise_bench.common import median
from haltwise_bench.natural_chat import PROMPTS as NATURAL_CHAT
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tools.model_args import add_model_arguments, batch_limit, engine_config_from

CODE = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
        "def describe(w, h):\n    return f\"{w} x {h}: area {area(w, h)}, perimeter {perimeter(w, h)}\"\n")
PROMPTS = {
    "echo": [
        f"Rename the function area to rectangle_area everywhere in this code and show the whole file:\n\n{CODE}",
        f"Add a docstring to each function of this code and show the whole file:\n\n{CODE}",
        'Rewrite this JSON with the key "name" renamed to "full_name" and show all of it:\n{"name": "Ada '
        'Lovelace", "born": 1815, "died": 1852, "field": "mathematics", "known_for": "the first published '
        'algorithm", "languages": ["English", "French"]}',
        "Quote the sentence about the harbour exactly, then say who lived there.\n\nThe town was small. In the "
        "old harbour, a fisherman named Tom lived with his three cats and an old blue boat. Every morning "
        "the boats left at dawn.",
    ],
    "plain": [
        "What is the capital of France? Answer in two sentences.",
        "Write a short poem about autumn leaves.",
        "Give me three tips for learning a new language.",
        "Explain what a black hole is to a ten year old.",
    ],
    "chat": list(NATURAL_CHAT[:6]),          # the first six of bench peers' natural chat
}
DRAFT = "draft"   # the setting where the draft model drafts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--speculative-k", type=int, nargs="*", default=[2, 4, 8], dest="ks",
                        help="prompt-lookup draft lengths K to compare with off (default 2 4 8; none: no "
                             "prompt-lookup settings)")
    parser.add_argument("--sets", nargs="+", choices=list(PROMPTS), default=["echo", "plain"],
                        help="prompt sets to run (default echo plain; chat: natural chat, answers that end)")
    parser.add_argument("--max-batch", nargs="+", type=batch_limit, default=None, dest="limits",
                        help="speculative_max_batch values to compare for each K (a count or 'none'; "
                             "default: the engine's)")
    parser.add_argument("--concurrency", type=int, default=1, help="copies of each prompt run at once")
    parser.add_argument("--max-tokens", type=int, default=128, help="new tokens per request at most")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")


def _generate(engine, prompt: list[int], k: int | str, max_tokens: int,
              copies: int) -> tuple[list[int], int, float, int, int]:
    """(the first copy's tokens, tokens decoded, their seconds, drafted, accepted) with K = k (DRAFT: the
    draft model) and `copies` copies of the prompt at once. The clock starts once every copy has its first
    token (so prefill is not counted) and tokens decoded are those after that moment."""
    engine.speculator.num_tokens = 0 if k == DRAFT else k
    engine.speculator.use_draft = k == DRAFT
    drafted, accepted = engine.speculator.num_drafted, engine.speculator.num_accepted
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens,
                            repetition_detection=RepetitionDetection(enabled=False))
    for i in range(copies):
        engine.add_request(f"bench-{i}", prompt, params)
    counts: dict[str, int] = {}
    start = at_start = None
    final = {}
    while engine.has_unfinished():
        for u in engine.step():
            counts[u.request_id] = len(u.outputs[0].token_ids)
            if u.finished:
                final[u.request_id] = list(u.outputs[0].token_ids)
        if start is None and len(counts) == copies and all(counts.values()):
            start, at_start = time.perf_counter(), sum(counts.values())
    seconds = time.perf_counter() - start
    tokens = final["bench-0"]
    if any(t != tokens for t in final.values()):
        raise RuntimeError("copies of one greedy prompt gave different tokens")
    return (tokens, sum(counts.values()) - at_start, seconds,
            engine.speculator.num_drafted - drafted, engine.speculator.num_accepted - accepted)


def run(args: argparse.Namespace) -> int:
    from haltwise.engine.factory import build_engine

    config = replace(engine_config_from(args), speculative_tokens=max(args.ks, default=0))
    engine = build_engine(args.model, config, tiny=args.tiny)
    if not engine.speculator.active:
        print("speculation cannot run on this engine (see the log): use the default --dtype auto", file=sys.stderr)
        return 1
    print(engine.describe(), file=sys.stderr)
    prompts = {name: [_encode(engine.tokenizer, p) for p in PROMPTS[name]] for name in args.sets}
    limits = [engine.config.speculative_max_batch] if args.limits is None else args.limits
    ks = [*args.ks, *([DRAFT] if engine.speculator.draft is not None else [])]
    settings = [(0, limits[0]), *((k, limit) for k in ks for limit in limits)]
    # (set, (K, max batch)) -> lists of (tokens after the first, seconds, drafted, accepted)
    runs: dict[tuple[str, tuple[int, int | None]], list[tuple[int, float, int, int]]] = {}
    errors = 0
    for round_ in range(args.rounds):
        for name, ids in prompts.items():
            for prompt in ids:
                reference = None
                for k, limit in settings if round_ % 2 == 0 else settings[::-1]:
                    engine.scheduler.config = replace(engine.scheduler.config, speculative_max_batch=limit)
                    tokens, decoded, seconds, drafted, accepted = _generate(engine, prompt, k, args.max_tokens,
                                                                            args.concurrency)
                    if reference is not None and tokens != reference:
                        errors += 1
                        print(f"MISMATCH at K={k} ({name})", file=sys.stderr)
                    reference = tokens
                    runs.setdefault((name, (k, limit)), []).append((decoded, seconds, drafted, accepted))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for name in prompts:
        base = _rate(runs[(name, settings[0])])
        for k, limit in settings:
            r = runs[(name, (k, limit))]
            drafted, accepted = sum(x[2] for x in r), sum(x[3] for x in r)
            rate = _rate(r)
            rows.append({"set": name, "k": k, "max_batch": limit if k else None, "tok_s": round(rate, 1),
                         "ratio": round(rate / base, 3),
                         "acceptance": round(accepted / drafted, 3) if drafted else None,
                         "accepted_per_step": round(accepted / max(1, sum(x[0] for x in r) - accepted), 3)})
    print(f"concurrency {args.concurrency}")
    print(f"{'set':6} {'K':>5} {'max batch':>9} {'tok/s':>8} {'ratio':>6} {'accept':>7}")
    for row in rows:
        acc = f"{row['acceptance']:.2f}" if row["acceptance"] is not None else "-"
        limit = "-" if not row["k"] else str(row["max_batch"]).lower()
        print(f"{row['set']:6} {row['k']:>5} {limit:>9} {row['tok_s']:>8.1f} {row['ratio']:>6.3f} {acc:>7}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "mismatches": errors, "max_tokens": args.max_tokens, "rounds": args.rounds,
                       "concurrency": args.concurrency}, f,
                      indent=2)
    return 1 if errors else 0


def _encode(tokenizer, text: str) -> list[int]:
    """A chat prompt, or the plain text for a model without a chat template (Gemma 3 270M's GGUF)."""
    if tokenizer.chat_template is None:
        return tokenizer.encode(text)
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}]),
                            add_special_tokens=False)


def _rate(runs: list[tuple[int, float, int, int]]) -> float:
    """Median over requests of decode tokens / decode seconds (a request that ended at its first token,
    e.g. an immediate end of text, decoded nothing and is left out)."""
    return median(n / s for n, s, _, _ in runs if n > 0 and s > 0) or 0.0
