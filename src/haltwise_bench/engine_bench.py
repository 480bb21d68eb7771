"""`haltwise bench engine`: haltwise against Hugging Face transformers, in one process, same GGUF.

Scenarios (full size; --quick shrinks them, --tiny is the test configuration):
  throughput      32 requests x 128 new tokens, all submitted at once, greedy, eos ignored.
                  haltwise: continuous batching; transformers: one generate() with batch 32.
                  tokens/s = all generated tokens / wall time.  Peak RSS of the process recorded.
  single_decode   1 request, 256 new tokens.  tokens/s = (tokens after the first) / (time after
                  the first token): the decode rate, prefill excluded.
  prefill         one 2,000-token prompt of real prose, 1 new token.  tokens/s = prompt tokens /
                  time to first token.
  chunked_prefill haltwise only: median TTFT of 8 short requests arriving while a 6,000-token
                  prompt is being prefilled, with chunked prefill on vs off (two engines over the
                  same weights).  ratio = TTFT(on) / TTFT(off): lower is better, target <= 0.33.
Both systems use the same prompts (token ids), --dtype and torch threads; the engine config haltwise
actually resolved (e.g. bfloat16 also turns on int4/int8 weight copies for decode steps of few rows)
is recorded in the JSON ("engine_config") and labels each haltwise row (extra["engine"]), so a row
never claims "same dtype" when the weights differ. haltwise runs with prefix caching off: repeats
reuse prompts, and a cache hit would skip the very prefill being measured. Before each scenario's
timed runs, each system runs it once untimed (same batch, a few tokens: kernels and buffers for that
shape warmed). The order alternates by repeat and by scenario, so with one repeat haltwise is not
always first. Every row names its ratio (extra["ratio_meaning"]); chunked_prefill's runs the other
way from the rest (lower is better).
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from haltwise_bench import common
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.haltwise_runner import HaltwiseRunner, sibling_engine


@dataclass(frozen=True)
class Sizes:
    batch: int = 32              # throughput: concurrent requests
    batch_tokens: int = 128      # throughput: new tokens per request
    prompt_len: int = 32         # throughput / decode prompts, tokens each
    decode_tokens: int = 256     # single-stream new tokens
    prefill_len: int = 2000      # prefill prompt tokens
    long_len: int = 6000         # chunked: the long prompt
    num_short: int = 8           # chunked: short requests arriving during its prefill
    short_len: int = 16          # chunked: short prompt tokens
    short_tokens: int = 4        # chunked: new tokens per short request


FULL = Sizes()
QUICK = Sizes(batch=16, batch_tokens=32, decode_tokens=64, prefill_len=1000, long_len=3000)
TINY = Sizes(batch=4, batch_tokens=8, prompt_len=8, decode_tokens=8, prefill_len=64, long_len=300,
             num_short=3, short_len=8, short_tokens=2)
TINY_BATCHED_TOKENS = 64  # so the tiny long prompt is really split into chunks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.add_argument("--dtypes", nargs="+", choices=["auto", "float32", "bfloat16"], default=None,
                        help="instead of transformers: haltwise per dtype, side by side (bench/dtype_bench.py)")


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every `haltwise bench` program takes."""
    parser.add_argument("--json", type=str, default=None, help="write the records here")
    parser.add_argument("--png", type=str, default=None, help="write a chart here")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (finishes in well under 3 minutes)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per system and scenario (median)")
    parser.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--model", default=None, help="GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--tiny", action="store_true", help="test only: random tiny model, tiny sizes")
    parser.add_argument("--engine-option", action="append", metavar="KEY=VALUE",
                        help="an EngineConfig field for the in-process haltwise engine (repeatable), "
                             "e.g. max_num_batched_tokens=1024")


def run(args: argparse.Namespace) -> int:
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    options = common.parse_engine_options(args.engine_option)
    if args.dtypes:
        from haltwise_bench.dtype_bench import run_dtypes

        result = run_dtypes(args.dtypes, sizes, repeats, args.model, args.tiny, progress, options)
        print(common.format_table(result["records"], "haltwise per --dtype (ratio: / best fixed dtype)"))
        common.write_json(args.json, result)
        return 0
    result = run_engine_bench(sizes, repeats, args.dtype, args.model, args.tiny, progress, options)
    what = "tiny random model, same weights" if args.tiny else "same GGUF"
    print(common.format_table(result["records"], f"haltwise vs transformers ({what}, {args.dtype}, same process)"))
    print(f"haltwise engine as resolved: {engine_label_from_dict(result['engine_config'])}")
    print(LEGEND)
    common.write_json(args.json, result)
    if args.png:
        from haltwise_bench.charts import records_panel, save_chart

        recs = result["records"]
        save_chart(args.png, [records_panel([r for r in recs if r["tokens_per_s"]], "tokens_per_s",
                                            "tokens/s (higher is better)", "tokens/s"),
                              records_panel(recs, "ttft_s", "time to first token (median)", "seconds")],
                   "haltwise bench engine")
    return 0


RATIO_MEANING = "haltwise / transformers tokens/s: > 1 means haltwise is faster"
CHUNKED_RATIO_MEANING = ("TTFT with chunked prefill on / off: < 1 means chunking helps (lower is better, "
                         "unlike the other rows); target <= 0.33")


def engine_label(config: Any) -> str:
    """What the haltwise engine really runs, in a few words (the resolved EngineConfig)."""
    if config.dtype == "auto":
        return "dtype auto: float32 activations and KV, each linear in its host-measured kernel-plan format"
    return f"dtype {config.dtype}: every linear, activation and the KV cache in {config.dtype}"


LEGEND = """\
tokens/s: throughput = generated tokens / wall time; single_decode = decode rate after the first token;
prefill = prompt tokens / time to first token.  TTFT: median seconds from arrival to first token.
ratio: haltwise / transformers on tokens/s (> 1: haltwise faster); chunked_prefill: TTFT with chunking
on / off (< 1: chunking helps; target <= 0.33).  Medians over repeats; noisy on a shared machine."""


def run_engine_bench(sizes: Sizes, repeats: int, dtype: str, model: str | None, tiny: bool,
                     progress: Progress, engine_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load both systems, run all scenarios, return {"benchmark", "environment", "config", "records"}."""
    from haltwise_bench.hf_runner import HFRunner, hf_twin_of, load_hf_from_gguf
    from haltwise.llm import LLM

    progress(f"loading haltwise ({'tiny' if tiny else model or 'SmolLM2 GGUF'}, {dtype})")
    options = {"enable_prefix_caching": False, **({"max_num_batched_tokens": TINY_BATCHED_TOKENS} if tiny else {}),
               **(engine_options or {})}
    llm = LLM(model, dtype=dtype, tiny=tiny, **options)
    ours = HaltwiseRunner(llm.engine)
    progress("loading transformers on the same weights")
    if tiny:
        hf_model = hf_twin_of(llm.engine.runner.model, dtype)
    else:
        hf_model = load_hf_from_gguf(model or common.default_gguf(), dtype)
    theirs = HFRunner(hf_model, pad_token_id=0)
    prompts = token_prompts(llm.tokenizer, sizes.batch, sizes.prompt_len)
    progress("warm-up (untimed)")
    for system in (ours, theirs):
        system.generate(prompts[:2], 2)

    records: list[dict[str, Any]] = []
    systems = [ours, theirs]
    scenarios = [("throughput", prompts, sizes.batch_tokens),
                 ("single_decode", prompts[:1], sizes.decode_tokens),
                 ("prefill", [token_prompts(llm.tokenizer, 1, sizes.prefill_len)[0]], 1)]
    for index, (scenario, batch, max_tokens) in enumerate(scenarios):
        runs: dict[str, list] = {s.name: [] for s in systems}
        for system in systems:
            progress(f"{scenario}: {system.name} warm-up (untimed)")
            system.generate(batch, min(max_tokens, 4))
        for rep in range(repeats):
            for system in run_order(systems, rep + index):
                progress(f"{scenario}: {system.name} run {rep + 1}/{repeats} "
                         f"({len(batch)} x {len(batch[0])}-token prompts, {max_tokens} new tokens)")
                runs[system.name].append(system.generate(batch, max_tokens))
        for name, timed in runs.items():
            records.append(_scenario_record(name, scenario, timed))
            label = engine_label(llm.engine.config) if name == ours.name else f"dtype {dtype}"
            records[-1]["extra"].update(engine=label, ratio_meaning=RATIO_MEANING)
    common.add_ratios(records)

    progress("chunked_prefill: building a second haltwise engine with chunked prefill off")
    records.extend(_chunked(llm, sizes, repeats, progress))
    return {"benchmark": "engine", "environment": common.environment(), "dtype": dtype, "repeats": repeats,
            "config": asdict(sizes), "engine_options": options, "engine_config": asdict(llm.engine.config),
            "records": records}


def run_order(systems: list[Any], turn: int) -> list[Any]:
    """Alternate who goes first: even turns as given, odd turns reversed."""
    return systems if turn % 2 == 0 else systems[::-1]


def engine_label_from_dict(config: dict[str, Any]) -> str:
    from types import SimpleNamespace

    return engine_label(SimpleNamespace(**config))


def _scenario_record(name: str, scenario: str, timed: list) -> dict[str, Any]:
    ttft = median(median(t.ttft_s) for t in timed)
    if scenario == "throughput":
        return record(name, scenario, median(t.tokens_per_s for t in timed), ttft, len(timed),
                      requests=len(timed[0].ttft_s), new_tokens=timed[0].new_tokens,
                      wall_s=median(t.wall_s for t in timed), peak_rss_mib=round(common.peak_rss_mib(), 1),
                      peak_rss_note="whole process after this scenario (both systems loaded)")
    if scenario == "single_decode":
        return record(name, scenario, median(t.decode_tokens_per_s for t in timed), ttft, len(timed),
                      new_tokens=timed[0].new_tokens, e2e_tokens_per_s=median(t.tokens_per_s for t in timed))
    return record(name, scenario, median(t.prompt_tokens / min(t.ttft_s) for t in timed), ttft, len(timed),
                  prompt_tokens=timed[0].prompt_tokens)


def _chunked(llm: Any, sizes: Sizes, repeats: int, progress: Progress) -> list[dict[str, Any]]:
    engines = {"haltwise chunked": HaltwiseRunner(llm.engine, "chunked"),
               "haltwise unchunked": HaltwiseRunner(sibling_engine(llm.engine, enable_chunked_prefill=False),
                                                    "unchunked")}
    long_prompt = token_prompts(llm.tokenizer, 1, sizes.long_len)[0]
    shorts = token_prompts(llm.tokenizer, sizes.num_short, sizes.short_len, offset_tokens=sizes.long_len)
    ttfts: dict[str, list[float]] = {k: [] for k in engines}
    names = list(engines)
    for name in names:
        progress(f"chunked_prefill: {name} warm-up (untimed)")
        engines[name].ttft_behind_long_prompt(long_prompt[:sizes.long_len // 4], shorts[:1], 1)
    for rep in range(repeats):
        for name in run_order(names, rep + 1):
            progress(f"chunked_prefill: {name} run {rep + 1}/{repeats} ({sizes.long_len}-token prompt + "
                     f"{sizes.num_short} short requests)")
            ttfts[name].append(median(engines[name].ttft_behind_long_prompt(long_prompt, shorts,
                                                                              sizes.short_tokens)))
    on, off = median(ttfts[names[0]]), median(ttfts[names[1]])
    extra = {"long_prompt_tokens": sizes.long_len, "short_requests": sizes.num_short, "lower_is_better": True,
             "engine": engine_label(llm.engine.config), "ratio_meaning": CHUNKED_RATIO_MEANING}
    rows = [record(names[0], "chunked_prefill", None, on, repeats, **extra),
            record(names[1], "chunked_prefill", None, off, repeats, **extra)]
    rows[0]["ratio"] = on / off if on and off else None
    rows[1]["ratio"] = 1.0
    return rows
