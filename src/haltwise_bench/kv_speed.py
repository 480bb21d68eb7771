"""`haltwise bench kv`: decode throughput with each KV cache dtype, one process, same weights (issue 25).

One model load (--dtype auto by default, the served path), then one engine per KV dtype over the same
weights (haltwise_runner.sibling_engine: its own pool and scheduler). For each scenario -- 1 client
(decode rate after the first token) and 32 clients (generated tokens / wall time), --tokens new tokens
per request with no stop but the count -- the dtypes are timed in turn, the order rotating every repeat;
medians per dtype and scenario, and ratio = rate / float32 KV's rate in the same run. Each request is
checked to run to its full length. Long contexts are where the KV dtype matters most (attention reads
grow with the context): --context puts that many prompt tokens before the decode.
"""
from __future__ import annotations

import argparse
from typing import Any

from haltwise_bench import common
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.engine_bench import common_arguments
from haltwise_bench.haltwise_runner import HaltwiseRunner, sibling_engine
from haltwise.models.kv_codec import KV_DTYPES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.set_defaults(dtype="auto")
    parser.add_argument("--kv-dtypes", default=",".join(KV_DTYPES), help="comma list; float32 is the reference")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32], help="scenarios: concurrent requests")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per request (default 128; --quick 48)")
    parser.add_argument("--context", type=int, default=None,
                        help="prompt tokens per request (default 512; --quick 128)")


def run(args: argparse.Namespace) -> int:
    from haltwise.llm import LLM

    dtypes = [d for d in args.kv_dtypes.split(",") if d]
    if bad := [d for d in dtypes if d not in KV_DTYPES]:
        raise SystemExit(f"bench kv: unknown KV dtypes {bad}; choose from {list(KV_DTYPES)}")
    tokens = args.tokens or (8 if args.tiny else 48 if args.quick else 128)
    context = args.context or (16 if args.tiny else 128 if args.quick else 512)
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    progress(f"loading {'tiny' if args.tiny else args.model or 'SmolLM2 GGUF'} ({args.dtype})")
    options = {"enable_prefix_caching": False, **common.parse_engine_options(args.engine_option)}
    base = LLM(args.model, dtype=args.dtype, tiny=args.tiny, **options).engine
    need = max(args.clients) * (context + tokens + 16)
    runners = {d: HaltwiseRunner(sibling_engine(base, kv_cache_dtype=d, kv_cache_memory=need * base.model_config
                                                .kv_bytes_per_token(d) * 2), name=d) for d in dtypes}
    prompts = token_prompts(base.tokenizer, max(args.clients), context)
    samples: dict[tuple[str, int], list[float]] = {}
    for repeat in range(repeats):
        order = dtypes[repeat % len(dtypes):] + dtypes[:repeat % len(dtypes)]
        for clients in args.clients:
            for d in order:
                runners[d].generate(prompts[:clients], 4)                     # warm this shape
                timed = runners[d].generate(prompts[:clients], tokens)
                if timed.new_tokens != clients * tokens:
                    raise SystemExit(f"bench kv: {d} generated {timed.new_tokens} tokens, expected "
                                     f"{clients * tokens} (a request ended early)")
                rate = timed.decode_tokens_per_s if clients == 1 else timed.tokens_per_s
                samples.setdefault((d, clients), []).append(rate)
                progress(f"repeat {repeat}: KV {d}, {clients} clients: {rate:.1f} tok/s")
    records = kv_records(samples, repeats, tokens, context)
    env = common.environment()
    title = (f"decode throughput per KV cache dtype ({args.dtype} weights, {env['cpu']}), {context} prompt + "
             f"{tokens} new tokens per request; ratio = rate / float32 KV's, same run")
    print(common.format_table(records, title))
    common.write_json(args.json, {"benchmark": "kv", "environment": env, "records": records,
                                  "config": {"dtypes": dtypes, "tokens": tokens, "context": context,
                                             "repeats": repeats, "clients": args.clients}})
    return 0


def kv_records(samples: dict[tuple[str, int], list[float]], repeats: int, tokens: int,
               context: int) -> list[dict[str, Any]]:
    """One row per (dtype, clients), medians; ratio to float32 KV where it ran."""
    records = []
    for (dtype, clients), rates in samples.items():
        row = record(f"KV {dtype}", f"{clients} client{'s' * (clients > 1)}", median(rates), repeats=repeats,
                     kv_dtype=dtype, clients=clients, tokens=tokens, context=context, samples=rates)
        reference = samples.get(("float32", clients))
        if reference:
            row["ratio"] = round(median(rates) / median(reference), 3)
        records.append(row)
    return records
