"""`haltwise eval-longctx`: perplexity vs position and passkey retrieval per RoPE scaling method.

For each window length (a multiple of the trained length) and each method (none, linear, dynamic, yarn,
llama3, with factor = length / trained length), the first `length` tokens of a long real text are run
through the engine's paged attention in prefill chunks, and the NLL of every next token is recorded.
Perplexity is reported per position bucket (for the plot) and over the whole window. At 1x every
method's factor is 1, so its tables equal no scaling's: configs whose rotary tables are identical are
computed once and reported as `identical_to`.

Passkey: a random 5-digit number hidden at several depths of the same text, asked for at the end
through the chat template; greedy decoding; a hit when the number appears in the answer.

Modes (costs grow with length squared; on 2 CPU cores one 16k-token window takes minutes):
  default  lengths 1x, 2x, 4x; all five methods; passkey depths 10%, 50%, 90%.
  --quick  the real trained length still (8192 for SmolLM2), but lengths 1x and 2x only, methods
           none and yarn only, and the passkey at depth 50% only.
  --tiny   the random tiny model (trained length 512) for tests: seconds.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from haltwise_bench import longctx_report, passkey
from haltwise_bench.common import longtext_files
from haltwise_bench.longctx_runner import (METHODS, greedy_generate, rope_key, rope_scaling_for, set_rope,
                                           token_nll)

QUICK = {"lengths": "1,2", "methods": "none,yarn", "passkey_depths": "0.5"}
FULL = {"lengths": "1,2,4", "methods": ",".join(METHODS), "passkey_depths": "0.1,0.5,0.9"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file or Hugging Face directory (default: SmolLM2)")
    p.add_argument("--text", action="append", default=None,
                   help="text file to evaluate on (repeatable; default: the plays in ../shared/data/longtext)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights, compute and KV")
    p.add_argument("--lengths", default=None, help="window lengths as multiples of the trained length (e.g. 1,2,4)")
    p.add_argument("--methods", default=None, help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--passkey-depths", default=None, help="needle depths as shares of the text (e.g. 0.1,0.5,0.9)")
    p.add_argument("--no-passkey", action="store_true", help="perplexity only")
    p.add_argument("--passkey-tokens", type=int, default=16,
                   help="tokens generated for the answer (SmolLM2 spells digits one token each)")
    p.add_argument("--chunk", type=int, default=512, help="prefill chunk size in tokens")
    p.add_argument("--bucket", type=int, default=None, help="position bucket in tokens (default trained length / 8)")
    p.add_argument("--seed", type=int, default=0, help="seed for the pass keys")
    p.add_argument("--quick", action="store_true", help="lengths 1x,2x; methods none,yarn; passkey depth 50%%")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON (updated as it runs)")
    p.add_argument("--png", default=None, metavar="PATH", help="plot perplexity vs position per method")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # random tiny model, for tests


def default_text_files() -> list[Path]:
    files = longtext_files()
    if not files:
        raise FileNotFoundError("no long text found in ../shared/data/longtext; pass --text FILE")
    return files


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _progress(label: str):
    last = [0.0]
    start = time.perf_counter()

    def report(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - last[0] >= 5.0:
            last[0] = now
            print(f"[eval-longctx] {label}: {done}/{total} tokens, {now - start:.0f}s", file=sys.stderr, flush=True)
    return report


def _load(args: argparse.Namespace):
    """(model, tokenizer, eos ids, trained length, model name)."""
    if args.tiny:
        from haltwise.models.tiny import tiny_llama
        from haltwise.tokenizer.tiny import tiny_tokenizer

        tokenizer = tiny_tokenizer()
        model = tiny_llama(tokenizer.vocab_size).to(getattr(torch, args.dtype))
        return model, tokenizer, tokenizer.eos_token_ids(), model.config.max_position_embeddings, "tiny"
    from haltwise.models.loader import load_model
    from haltwise.tools.model_args import load_tokenizer

    loaded = load_model(args.model, dtype=args.dtype)
    tokenizer = load_tokenizer(loaded.path)
    eos = tokenizer.eos_token_ids(tuple(loaded.generation_eos_ids) + tuple(loaded.config.eos_token_ids))
    return loaded.model, tokenizer, eos, loaded.config.max_position_embeddings, loaded.path.name


def _buckets(nll: torch.Tensor, bucket: int) -> list[dict[str, Any]]:
    """nll[i] belongs to the token at position i + 1; bucket b holds positions b*bucket..(b+1)*bucket-1."""
    out = []
    positions = torch.arange(1, len(nll) + 1)
    for start in range(0, len(nll) + 1, bucket):
        sel = nll[(positions >= start) & (positions < start + bucket)]
        if len(sel):
            out.append({"start": start, "end": min(start + bucket, len(nll) + 1), "tokens": len(sel),
                        "ppl": math.exp(float(sel.mean()))})
    return out


def run(args: argparse.Namespace) -> int:
    mode = QUICK if args.quick else FULL
    lengths_x = _floats(args.lengths or mode["lengths"])
    methods = [m.strip() for m in (args.methods or mode["methods"]).split(",") if m.strip()]
    depths = [] if args.no_passkey else _floats(args.passkey_depths or mode["passkey_depths"])
    for m in methods:
        rope_scaling_for(m, 2.0, 2)  # raises on an unknown method before anything is loaded
    files = [Path(t) for t in args.text] if args.text else default_text_files()
    model, tokenizer, eos, trained, name = _load(args)
    text = "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)
    text_ids = tokenizer.encode(text, add_special_tokens=False)
    lengths = [int(round(x * trained)) for x in lengths_x]
    if max(lengths) > len(text_ids):
        print(f"eval-longctx: the text has {len(text_ids)} tokens, fewer than the longest window {max(lengths)}",
              file=sys.stderr)
        return 2
    bucket = args.bucket or max(1, trained // 8)
    result: dict[str, Any] = {
        "model": name, "trained_length": trained, "dtype": args.dtype, "chunk": args.chunk, "bucket": bucket,
        "quick": bool(args.quick), "texts": [str(f) for f in files], "text_tokens": len(text_ids),
        "lengths": lengths, "methods": methods, "perplexity": [], "passkey": []}
    print(f"[eval-longctx] {name}: trained length {trained}, windows {lengths}, methods {methods}, "
          f"passkey depths {depths}, {len(text_ids)} text tokens", file=sys.stderr, flush=True)

    done: dict[tuple, dict[str, Any]] = {}   # rope_key -> first result with those tables
    for length in lengths:
        for method in methods:
            rs = rope_scaling_for(method, length / trained, trained)
            key = rope_key(model.config, rs, length)
            row = {"method": method, "length": length, "factor": length / trained, "rope_scaling": rs}
            if key in done:
                first = done[key]
                row.update(ppl=first["ppl"], buckets=first["buckets"], seconds=0.0, identical_to=first["method"])
            else:
                set_rope(model, rs, length)
                t0 = time.perf_counter()
                nll = token_nll(model, text_ids[:length], args.chunk, _progress(f"perplexity {method} {length}"))
                row.update(ppl=math.exp(float(nll.mean())), buckets=_buckets(nll, bucket),
                           seconds=round(time.perf_counter() - t0, 1), identical_to=None)
                done[key] = row
            print(f"[eval-longctx] perplexity {method:>7} @ {length}: {row['ppl']:.3f}", file=sys.stderr, flush=True)
            result["perplexity"].append(row)
            if args.json:
                longctx_report.write_json(args.json, result)

    rng = random.Random(args.seed)
    keys = {(length, d): passkey.new_key(rng) for length in lengths for d in depths}
    answered: dict[tuple, dict[str, Any]] = {}
    for length in lengths:
        for method in methods:
            rs = rope_scaling_for(method, length / trained, trained)
            key = rope_key(model.config, rs, length)
            for depth in depths:
                if (key, depth) in answered:
                    result["passkey"].append({**answered[(key, depth)], "method": method})
                    continue
                set_rope(model, rs, length)
                prompt = passkey.build_prompt(tokenizer, text_ids, keys[(length, depth)], depth,
                                              length - args.passkey_tokens)
                out = greedy_generate(model, prompt.prompt_ids, args.passkey_tokens, args.chunk, eos)
                answer = tokenizer.decode(out)
                row = {"method": method, "length": length, "depth": depth, "key": prompt.key,
                       "prompt_tokens": len(prompt.prompt_ids), "needle_token": prompt.needle_token,
                       "answer": answer, "success": passkey.found(prompt.key, answer)}
                answered[(key, depth)] = row
                print(f"[eval-longctx] passkey {method:>7} @ {length} depth {depth:.0%}: "
                      f"{'hit' if row['success'] else 'miss'} {answer!r}", file=sys.stderr, flush=True)
                result["passkey"].append(row)
                if args.json:
                    longctx_report.write_json(args.json, result)

    print(longctx_report.table(result))
    if args.json:
        longctx_report.write_json(args.json, result)
    if args.png:
        longctx_report.plot(args.png, result)
    return 0
