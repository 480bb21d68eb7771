"""`haltwise generate "PROMPT"`: stream one generation to stdout; the termination record to stderr."""
from __future__ import annotations

import argparse
import json
import sys
import time

from haltwise.tools.model_args import add_model_arguments, engine_config_from


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user message in the chat template")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--stop-preset", action="append", default=[], help="json, line, paragraph, code_block, turn")
    p.add_argument("--ignore-eos", action="store_true")
    add_model_arguments(p)


def run(args: argparse.Namespace) -> int:
    from haltwise.errors import HaltwiseError
    from haltwise.llm import LLM
    from haltwise.sampling_params import ParamError, SamplingParams

    start = time.perf_counter()
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                                top_k=args.top_k, seed=args.seed, stop=tuple(args.stop),
                                stop_presets=tuple(args.stop_preset), ignore_eos=args.ignore_eos)
    except ParamError as e:
        print(f"haltwise generate: {e}", file=sys.stderr)
        return 2
    llm = LLM(model=args.model, rope_scaling=args.rope_scaling, tiny=args.tiny, chat_template=args.chat_template,
              **_engine_kwargs(args))
    loaded = time.perf_counter()
    tok = llm.tokenizer
    try:
        ids = llm.chat_prompt_ids([{"role": "user", "content": args.prompt}]) if args.chat else tok.encode(args.prompt)
    except ValueError as e:  # --chat with a model that has no chat template
        print(f"haltwise generate: {e}", file=sys.stderr)
        return 2
    first = None
    try:
        for update in llm.stream(ids, params):
            out = update.outputs[0]
            if out.delta_text:
                first = first or time.perf_counter()
                sys.stdout.write(out.delta_text)
                sys.stdout.flush()
    except HaltwiseError as e:
        print(f"haltwise generate: {e.message}", file=sys.stderr)
        return 2
    end = time.perf_counter()
    sys.stdout.write("\n")
    n = len(out.token_ids)
    report = {"termination": out.termination.to_dict(), "finish_reason": out.finish_reason,
              "stop_reason": out.stop_reason, "prompt_tokens": len(ids), "completion_tokens": n,
              "load_s": round(loaded - start, 3), "first_text_s": round((first or end) - start, 3),
              "decode_tokens_per_s": round(n / max(end - loaded, 1e-9), 2)}
    print(json.dumps(report), file=sys.stderr)
    return 0


def _engine_kwargs(args: argparse.Namespace) -> dict:
    config = engine_config_from(args)
    return {k: getattr(config, k) for k in ("dtype", "block_size", "kv_cache_memory", "max_model_len", "max_num_seqs",
                                            "max_num_batched_tokens", "enable_chunked_prefill",
                                            "enable_prefix_caching", "num_threads")}
