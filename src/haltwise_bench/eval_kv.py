"""`haltwise eval-kv`: what a KV cache dtype costs in quality, on the default path (dtype auto).

The model is built as `haltwise serve` builds it (the kernel plan, the native layer stack); only the KV
cache's storage changes between runs (float32 / bfloat16 / int8: models/kv_codec.py). Two measures
against float32 KV, on the long real texts in ../shared/data/longtext:

  perplexity  the NLL of every next token over the first max(lengths) tokens (prefill chunks), reported
              per position range [0, 1k), [1k, 4k), [4k, 8k) (the --lengths edges) and its delta vs float32;
  greedy      from prompts cut out of the text at each --greedy-at position, --greedy-tokens greedy tokens:
              the share of tokens equal to float32 KV's and the first position they differ.

It prints a table (stdout) and, with --json, writes the numbers. Costs grow with the length squared; on
2 CPU cores an 8k window takes minutes per dtype. --tiny: the random tiny model, for tests.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import torch

from haltwise_bench.common import longtext_files
from haltwise_bench.longctx_runner import greedy_generate, token_nll
from haltwise.models.kv_codec import KV_DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file or a named model (default: SmolLM2)")
    p.add_argument("--kv-dtypes", default=",".join(KV_DTYPES), help="comma list; float32 is the reference")
    p.add_argument("--lengths", default="1024,4096,8192", help="position range edges for perplexity (tokens)")
    p.add_argument("--greedy-at", default="1024,4096", help="prompt lengths for the greedy comparison")
    p.add_argument("--greedy-tokens", type=int, default=128)
    p.add_argument("--chunk", type=int, default=512, help="prefill chunk size in tokens")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # random tiny model, for tests


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _load(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(planned model as serve runs it, tokenizer, name)."""
    from haltwise.config import EngineConfig
    from haltwise.engine.factory import build_engine

    # The runs keep their own single-sequence caches (longctx_runner.SingleSequence): the engine's pool
    # only has to hold one sequence of the model's window, which start-up checks (256 MiB: SmolLM2's 8k
    # and the catalog's 32k windows in int8).
    engine = build_engine(args.model, EngineConfig(dtype="auto", kv_cache_memory=256 * 2**20), tiny=args.tiny)
    return engine.runner.model, engine.tokenizer, "tiny" if args.tiny else (args.model or "smollm2-135m")


def _text_ids(tokenizer: Any, need: int, tiny: bool) -> list[int]:
    files = longtext_files()
    if not files:
        raise SystemExit("eval-kv: ../shared/data/longtext is missing (the long texts this measures on)")
    text = "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if tiny:
        ids = [i % tokenizer.vocab_size for i in ids]
    if len(ids) < need:
        raise SystemExit(f"eval-kv: the texts have {len(ids)} tokens, fewer than {need}")
    return ids[:need]


def _ranges(nll: torch.Tensor, edges: list[int]) -> list[dict[str, Any]]:
    out, lo = [], 0
    for hi in edges:
        part = nll[lo:min(hi, len(nll))]
        if len(part):
            out.append({"from": lo, "to": lo + len(part), "ppl": math.exp(float(part.mean()))})
        lo = hi
    return out


def _agreement(ours: list[int], ref: list[int]) -> tuple[float, int | None]:
    same = sum(a == b for a, b in zip(ours, ref)) / max(1, len(ref))
    first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    return same, first


def run(args: argparse.Namespace) -> int:
    dtypes = [d for d in args.kv_dtypes.split(",") if d]
    if "float32" not in dtypes:
        dtypes.insert(0, "float32")
    bad = [d for d in dtypes if d not in KV_DTYPES]
    if bad:
        print(f"eval-kv: unknown KV dtypes {bad}; choose from {list(KV_DTYPES)}", file=sys.stderr)
        return 2
    model, tokenizer, name = _load(args)
    trained = model.config.max_position_embeddings
    edges = [e for e in _ints(args.lengths) if e <= trained] or [trained]
    at = [a for a in _ints(args.greedy_at) if a + args.greedy_tokens <= trained]
    ids = _text_ids(tokenizer, max(edges + [a + 1 for a in at]), args.tiny)
    result: dict[str, Any] = {"model": name, "edges": edges, "greedy_at": at, "greedy_tokens": args.greedy_tokens,
                              "runs": {}}
    for dtype in dtypes:
        t0 = time.perf_counter()
        nll = token_nll(model, ids[:max(edges)], args.chunk, kv_dtype=dtype)
        greedy = [greedy_generate(model, ids[:a], args.greedy_tokens, args.chunk, kv_dtype=dtype) for a in at]
        result["runs"][dtype] = {"ranges": _ranges(nll, edges), "greedy": greedy,
                                 "seconds": round(time.perf_counter() - t0, 1)}
        print(f"[eval-kv] {dtype}: {result['runs'][dtype]['seconds']} s", file=sys.stderr, flush=True)
    ref = result["runs"]["float32"]
    print(f"eval-kv: {name}, default path (dtype auto), perplexity by position and greedy agreement vs float32 KV")
    header = "".join(f"{r['from']:>6}-{r['to']:<6} " for r in ref["ranges"])
    print(f"{'KV dtype':<10} {header}" + "".join(f"greedy@{a:<6} " for a in at))
    for dtype in dtypes:
        run_ = result["runs"][dtype]
        cells = []
        for r, r0 in zip(run_["ranges"], ref["ranges"]):
            r["delta_pct"] = 100.0 * (r["ppl"] / r0["ppl"] - 1.0)
            cells.append(f"{r['ppl']:7.3f} {r['delta_pct']:+5.2f}%"[:13].ljust(14))
        run_["agreement"] = []
        for g, g0 in zip(run_["greedy"], ref["greedy"]):
            same, first = _agreement(g, g0)
            run_["agreement"].append({"same": same, "first_difference": first})
            cells.append(f"{100 * same:5.1f}% d@{first if first is not None else '-'}".ljust(14))
        print(f"{dtype:<10} " + "".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0
