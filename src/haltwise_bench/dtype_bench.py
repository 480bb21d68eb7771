"""`haltwise bench engine --dtypes auto float32 bfloat16`: haltwise against itself, one engine per dtype.

Same scenarios and sizes as bench engine (throughput: batch of requests at once; single_decode;
prefill), same prompts, same process and threads, engines run alternately (order rotated each
repeat), medians over repeats. ratio = that dtype / the best fixed dtype (float32 or bfloat16) of the
scenario: auto >= 1 means the kernel plan beats every single format. A dtype this host refuses
(bfloat16 where bf16 matmuls fail) is reported as skipped, with the reason.
"""
from __future__ import annotations

from typing import Any

from haltwise_bench import common
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.haltwise_runner import HaltwiseRunner

KV_MEMORY = 256 * 2**20   # per engine: several engines share this process


def run_dtypes(dtypes: list[str], sizes: Any, repeats: int, model: str | None, tiny: bool, progress: Progress,
               engine_options: dict[str, Any] | None = None) -> dict[str, Any]:
    from haltwise.llm import LLM

    options = {"enable_prefix_caching": False, "kv_cache_memory": KV_MEMORY, **(engine_options or {})}
    runners: dict[str, HaltwiseRunner] = {}
    skipped: dict[str, str] = {}
    tokenizer = None
    for dtype in dtypes:
        progress(f"loading haltwise --dtype {dtype}")
        try:
            llm = LLM(model, dtype=dtype, tiny=tiny, **options)
        except ValueError as e:
            skipped[dtype] = str(e)
            continue
        runners[dtype] = HaltwiseRunner(llm.engine, f"haltwise {dtype}")
        tokenizer = llm.tokenizer
    if tokenizer is None:
        raise SystemExit(f"no dtype could run here: {skipped}")
    prompts = token_prompts(tokenizer, sizes.batch, sizes.prompt_len)
    for runner in runners.values():
        runner.generate(prompts[:2], 2)                                 # warm-up, untimed
    scenarios = [("throughput", prompts, sizes.batch_tokens), ("single_decode", prompts[:1], sizes.decode_tokens),
                 ("prefill", [token_prompts(tokenizer, 1, sizes.prefill_len)[0]], 1)]
    records: list[dict[str, Any]] = []
    names = list(runners)
    for scenario, batch, max_tokens in scenarios:
        rates: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                progress(f"{scenario}: --dtype {name} run {rep + 1}/{repeats}")
                t = runners[name].generate(batch, max_tokens)
                rates[name].append(t.tokens_per_s if scenario == "throughput" else t.decode_tokens_per_s
                                   if scenario == "single_decode" else t.prompt_tokens / t.ttft_s[0])
        rows = {n: record(f"haltwise {n}", scenario, median(r), None, repeats, runs=r) for n, r in rates.items()}
        fixed = [rows[n]["tokens_per_s"] for n in rows if n != "auto"]
        for row in rows.values():
            row["ratio"] = row["tokens_per_s"] / max(fixed) if fixed and max(fixed) else None
        records += rows.values()
    plans = {n: r.engine.kernel_plan.to_json() for n, r in runners.items() if r.engine.kernel_plan is not None}
    return {"benchmark": "engine-dtypes", "environment": common.environment(), "repeats": repeats,
            "dtypes": names, "skipped": skipped, "records": records, "kernel_plans": plans}
