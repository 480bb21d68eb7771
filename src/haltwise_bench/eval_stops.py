"""`haltwise eval-stops`: does layered termination beat a bare token limit? (seed 000 §4.4, honestly)

The prompt set (src/haltwise_bench/data/stop_prompts.jsonl) holds chat prompts of several kinds, each
with the stop strings / presets that fit its kind (short answers: line; lists: paragraph; JSON:
json; code: code_block; chat turns: turn + "\\nUser:"; loop-prone prompts: none). Every strategy
runs the whole set through the real model, greedy, all prompts submitted at once (batched):

  a  max_tokens only      eos ignored, no stop strings, no loop detection
  b  + eos                the model's end-of-generation tokens end the text
  c  + stops for the kind the prompt's stop strings and presets
  d  + loop detection     repetition detector on (default settings)
  e  + deadline           everything, and a per-request deadline (--deadline seconds)
  f  e + grammar          e, and JSON prompts constrained to the JSON Schema their check carries (what
                          the prompt asks for, as a client would send it), else to a JSON object
  g  eos + auto + loops   no hand-chosen stops: stop_presets ["auto"] picks them from the prompt
  h  e + whole-word stops e, with stop_boundary "word" (a stop word does not cut inside a longer word)

Word stops: the prompts whose stop strings begin or end with a word character (the word_stop kind:
user stops such as "end" or "Human" that also occur inside other words) get a section of their own,
prefix matching (e) against whole-word matching (h): false cuts and completeness on those prompts.

Each strategy is one row of STRATEGIES (a Strategy: which layers it turns on, plus an optional
per-prompt hook for request fields a later strategy adds, e.g. a grammar); add a row to add one.
The yardstick (bench/stop_metrics.py) judges every strategy by the same independent content ends:
each prompt's checker (bench/content_checks.py, stored in the prompt set as "check") run on
strategy b's text, which is therefore always run. Completeness, false cuts (answers a strategy cut
before their content ended), JSON parse rate, latency p50/p95, token efficiency and runaways are
defined there.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from haltwise_bench import common, stop_metrics
from haltwise_bench.common import Progress
from haltwise_bench.stop_metrics import Generation
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.stop_strings import is_word_char
from haltwise.stopping.intent import resolve_auto
from haltwise.structured.spec import StructuredOutputs

PROMPT_SET = "stop_prompts.jsonl"


@dataclass(frozen=True)
class StopPrompt:
    id: str
    kind: str
    messages: tuple[dict[str, str], ...]
    stop: tuple[str, ...] = ()
    stop_presets: tuple[str, ...] = ()
    check: dict[str, Any] = field(default_factory=lambda: {"type": "endless"})  # content_checks.py


@dataclass(frozen=True)
class Strategy:
    """One rung of the ladder: which termination layers a request gets."""

    label: str
    eos: bool = True
    stops: bool = False              # the prompt's stop strings and presets
    loops: bool = False              # the repetition detector
    deadline: bool = False           # a per-request deadline
    extra: Callable[[StopPrompt], dict[str, Any]] | None = None  # more SamplingParams fields per prompt

    def params(self, prompt: StopPrompt, max_tokens: int, deadline_s: float) -> SamplingParams:
        fields: dict[str, Any] = dict(
            temperature=0.0, max_tokens=max_tokens, ignore_eos=not self.eos,
            stop=prompt.stop if self.stops else (), stop_presets=prompt.stop_presets if self.stops else (),
            repetition_detection=RepetitionDetection(enabled=self.loops),
            timeout=deadline_s if self.deadline else None)
        fields.update(self.extra(prompt) if self.extra else {})
        return resolve_auto(SamplingParams(**fields), [last_user_text(prompt)])  # no-op without "auto"


def last_user_text(prompt: StopPrompt) -> str | None:
    return next((m["content"] for m in reversed(prompt.messages) if m.get("role") == "user"), None)


def _json_grammar(prompt: StopPrompt) -> dict[str, Any]:
    """(f): a JSON prompt is constrained to its schema (else any JSON object): it ends when the value closes.
    An array asked for gets an array: json_object alone would force an object around it."""
    if prompt.kind != "json":
        return {}
    schema = prompt.check.get("schema")
    structure = StructuredOutputs(json=schema, name=prompt.id) if schema else StructuredOutputs(json_object=True)
    return {"structured_outputs": structure}


def _auto_presets(prompt: StopPrompt) -> dict[str, Any]:
    """(g): the intent classifier, not a hand-chosen list, picks the structural presets."""
    return {"stop_presets": ("auto",)}


def _whole_words(prompt: StopPrompt) -> dict[str, Any]:
    """(h): stop strings match whole words only."""
    return {"stop_boundary": "word"}


def has_word_stop(prompt: StopPrompt) -> bool:
    """A stop string that begins or ends with a word character (where the two matchers differ)."""
    return any(is_word_char(s[0]) or is_word_char(s[-1]) for s in prompt.stop)


STRATEGIES: dict[str, Strategy] = {
    "a": Strategy("a max_tokens only", eos=False),
    "b": Strategy("b + eos"),
    "c": Strategy("c + stop strings/presets", stops=True),
    "d": Strategy("d + loop detection", stops=True, loops=True),
    "e": Strategy("e + deadline (everything)", stops=True, loops=True, deadline=True),
    "f": Strategy("f e + grammar for JSON", stops=True, loops=True, deadline=True, extra=_json_grammar),
    "g": Strategy("g eos + auto presets + loops", loops=True, extra=_auto_presets),
    "h": Strategy("h e + whole-word stops", stops=True, loops=True, deadline=True, extra=_whole_words),
}
LABELS = {k: v.label for k, v in STRATEGIES.items()}
REFERENCE = "b"  # its text is where the content checkers look (the model's own longest answer)
WORD_PAIR = ("e", "h")  # prefix vs whole-word matching, otherwise the same layers


def load_prompt_set(path: str | Path | None = None) -> list[StopPrompt]:
    """The prompt set: a JSONL file (default: the one shipped in haltwise/data)."""
    text = (Path(path).read_text(encoding="utf-8") if path is not None
            else resources.files("haltwise_bench").joinpath("data", PROMPT_SET).read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [StopPrompt(r["id"], r["kind"], tuple(r["messages"]), tuple(r.get("stop", ())),
                       tuple(r.get("stop_presets", ())), r.get("check", {"type": "endless"})) for r in rows]


def first_per_kind(prompts: list[StopPrompt], n: int) -> list[StopPrompt]:
    """The first n prompts of each kind, in file order."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        seen[p.kind] = seen.get(p.kind, 0) + 1
        if seen[p.kind] <= n:
            out.append(p)
    return out


def strategy_params(strategy: str, prompt: StopPrompt, max_tokens: int, deadline_s: float) -> SamplingParams:
    """Greedy SamplingParams for one prompt under one strategy."""
    return STRATEGIES[strategy].params(prompt, max_tokens, deadline_s)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=None, help="per generation (default 256; --quick 64)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="strategy e's per-request deadline in seconds (default 60; --quick 30)")
    parser.add_argument("--prompts", type=str, default=None, help="a JSONL prompt set (default: the shipped one)")
    parser.add_argument("--per-kind", type=int, default=None, help="use only the first N prompts of each kind")
    parser.add_argument("--strategies", default="".join(STRATEGIES), help="which strategies to run, e.g. ade")
    parser.add_argument("--json", type=str, default=None, help="write per-strategy records and generations here")
    parser.add_argument("--png", type=str, default=None, help="write a chart here")
    parser.add_argument("--quick", action="store_true", help="2 prompts per kind, 64 tokens")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--model", default=None, help="GGUF file or HF directory (default: SmolLM2)")
    parser.add_argument("--tiny", action="store_true", help="test only: random tiny model")


def run(args: argparse.Namespace) -> int:
    from haltwise.llm import LLM

    progress = Progress()
    prompts = load_prompt_set(args.prompts)
    per_kind = args.per_kind or (2 if args.quick else None)
    if per_kind:
        prompts = first_per_kind(prompts, per_kind)
    max_tokens = args.max_tokens or (64 if args.quick else 256)
    deadline = args.deadline or (30.0 if args.quick else 60.0)
    strategies = [s for s in STRATEGIES if s in args.strategies or s == REFERENCE]  # the yardstick needs b
    progress(f"loading the model ({'tiny' if args.tiny else args.model or 'SmolLM2'}, {args.dtype})")
    # Prefix caching off: every strategy reruns the same prompts, and cache hits for the later ones
    # would bias the latency comparison.
    llm = LLM(args.model, dtype=args.dtype, tiny=args.tiny, enable_prefix_caching=False)
    result = evaluate(llm, prompts, strategies, max_tokens, deadline, progress)
    print(stop_metrics.format_table(result["strategies"], LABELS))
    print(LEGEND)
    if result["word_stops"]:
        print(f"\nword stops ({len(result['word_stop_prompts'])} prompts whose stop strings are words):")
        print(stop_metrics.format_word_table(result["word_stops"], LABELS))
    common.write_json(args.json, result)
    if args.png:
        save_eval_chart(args.png, result["strategies"])
    return 0


LEGEND = """\
complete: share of the prompts with a known content end (each prompt's checker on strategy b's text) whose
text holds the whole answer; trunc.: share of those whose text stops short of it (any reason); false cut:
answers the strategy's own stop cut before their content ended; json ok: a JSON value decodes from the
first '{' or '['; valid: it also validates against the prompt's JSON Schema; lat p50/p95: seconds
arrival -> finish (all prompts at once); gen tok: tokens returned; useful: tokens up to the content end
(0 where the answer never completes); effic.: useful / gen tok; runaway: cut by max_tokens or the window;
deadline: cut by the deadline. Word stops: the same, on the prompts whose stop strings are words, prefix
(e) vs whole-word (h) matching. Definitions: haltwise/bench/stop_metrics.py and content_checks.py."""


def evaluate(llm: Any, prompts: list[StopPrompt], strategies: list[str], max_tokens: int, deadline_s: float,
             progress: Callable[[str], None]) -> dict[str, Any]:
    """Run each strategy over all prompts (batched); return summaries and every generation."""
    ids = [llm.chat_prompt_ids(list(p.messages)) for p in prompts]
    run_batch(llm.engine, prompts[:1], ids[:1], [strategy_params("a", prompts[0], 2, deadline_s)], "warmup")
    gens: dict[str, list[Generation]] = {}
    for s in strategies:
        progress(f"strategy {LABELS[s]}: {len(prompts)} prompts, max_tokens {max_tokens}")
        gens[s] = run_batch(llm.engine, prompts, ids, [strategy_params(s, p, max_tokens, deadline_s) for p in prompts],
                            f"eval-{s}")
    checks = {p.id: p.check for p in prompts}

    def prefix_chars(g: Generation, k: int) -> int:
        return len(llm.tokenizer.decode(list(g.token_ids[:k])))

    ends = stop_metrics.reference_content_ends(gens[REFERENCE], checks, prefix_chars)
    diverging = stop_metrics.divergences(gens)
    if diverging:
        progress(f"warning: {len(diverging)} generations are not a prefix of their prompt's longest greedy "
                 f"sequence (judged on their own text): {diverging[:5]}")
    diverged = {(d["strategy"], d["prompt_id"]) for d in diverging}
    summaries = [stop_metrics.summarize(s, gens[s], ends, checks, diverged) for s in strategies]
    word_ids = {p.id for p in prompts if has_word_stop(p)}
    word_stops = [stop_metrics.subset_cuts(s, gens[s], ends, checks, diverged, word_ids)
                  for s in strategies if s in WORD_PAIR] if word_ids else []
    return {"benchmark": "eval-stops", "environment": common.environment(), "max_tokens": max_tokens,
            "deadline_s": deadline_s, "reference_strategy": REFERENCE, "labels": LABELS,
            "kinds": sorted({p.kind for p in prompts}), "strategies": summaries,
            "word_stop_prompts": sorted(word_ids), "word_stops": word_stops,
            "content_ends": {pid: asdict(e) for pid, e in ends.items()}, "divergences": diverging,
            "generations": {s: [asdict(g) for g in gs] for s, gs in gens.items()}}


def run_batch(engine: Any, prompts: list[StopPrompt], ids: list[list[int]], params: list[SamplingParams],
              tag: str) -> list[Generation]:
    """Submit every prompt at once to the engine and step until all have finished."""
    request_ids = [f"{tag}-{p.id}" for p in prompts]
    for rid, prompt_ids, sp in zip(request_ids, ids, params):
        engine.add_request(rid, prompt_ids, sp)
    final = {}
    while len(final) < len(request_ids):
        for update in engine.step():
            if update.finished and update.request_id in request_ids:
                final[update.request_id] = update
    out = []
    for rid, p in zip(request_ids, prompts):
        o = final[rid].outputs[0]
        out.append(Generation(p.id, p.kind, o.termination.reason.value, len(o.token_ids),
                              final[rid].latency, o.text, tuple(o.token_ids)))
    return out


def save_eval_chart(path: str | Path, summaries: list[dict[str, Any]]) -> Path:
    from haltwise_bench.charts import panel, save_chart

    cats = [LABELS[s["strategy"]] for s in summaries]
    shares = panel("shares (higher is better)", "share", cats,
                   {"completeness": [s["completeness"] for s in summaries],
                    "JSON parses": [s["json_parse_rate"] for s in summaries],
                    "token efficiency": [s["token_efficiency"] for s in summaries]})
    latency = panel("latency (all prompts at once)", "seconds", cats,
                    {"p50": [s["latency_p50_s"] for s in summaries], "p95": [s["latency_p95_s"] for s in summaries]})
    runaway = panel("cut generations (lower is better)", "count", cats,
                    {"runaways (token limit)": [s["runaways"] for s in summaries],
                     "false cuts": [s["false_cuts"] for s in summaries],
                     "deadline cuts": [s["deadline_cuts"] for s in summaries]})
    return save_chart(path, [shares, latency, runaway], "haltwise eval-stops: stop strategies compared")
