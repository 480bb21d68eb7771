"""`haltwise bench moe`: MoE decode at Qwen3-30B-A3B's real layer shapes, haltwise vs llama.cpp, same file.

No real weights: moe_gguf.py makes a random-weight qwen3moe GGUF with the real per-layer shapes (hidden 2048,
32 q / 4 kv heads of 128, 128 experts of width 768, 8 active, vocab 151,936), quantized to Q4_K_M by
llama-quantize, in two depths: --layers (default 4) and --base-layers (default 1). Both systems run both files
in the same run, alternating who goes first, with the same thread count:

  haltwise   this process, the default path (--dtype auto: each linear in its planned format, the mapped file):
             n distinct --prompt-tokens prompts at once, --decode-tokens new tokens each, greedy, eos ignored;
             decode rate = tokens after each stream's first / time after the last first token; prompt
             lookup off (one token a step, as the peer)
  llama.cpp  llama-batched-bench -npp P -ntg N -npl 1,8: speed_tg, the decode steps' rate over all sequences

Per stream count n, a decode step of n rows takes step_ms = n * 1000 / (tokens/s of all n streams); a layer's
share is (step_ms[layers] - step_ms[base]) / (layers - base): the embedding, final norm, lm_head (151,936 x
2048, as big as ~1 MoE layer's active weights) and sampling cancel out. ratio = llama.cpp's ms / haltwise's ms
(> 1: haltwise faster). The issue's goals: >= 1.0 at 1 stream, >= 2 at 8.
"""
from __future__ import annotations

import argparse
import gc
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from haltwise_bench import common, llama_cpp
from haltwise_bench.common import Progress, median, token_prompts
from haltwise_bench.moe_gguf import MoeShape, build

PEER_BINARIES = ("llama-quantize", "llama-batched-bench")
SYSTEMS = ("haltwise", "llama.cpp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int, default=4, help="MoE layers in the timed file (default 4 of 48)")
    parser.add_argument("--base-layers", type=int, default=1,
                        help="layers of the second file whose step time is subtracted (default 1; 0: no second "
                             "file, the per-layer figure is then the whole step / layers, lm_head included)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8], help="sequences decoded together")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, default=32, help="new tokens per stream")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per system and file (median)")
    parser.add_argument("--threads", type=int, default=2, help="threads for both systems")
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--llama-bin", default=None,
                        help=f"directory with llama-quantize and llama-batched-bench (default "
                             f"$HALTWISE_LLAMA_CPP_BIN or {llama_cpp.DEFAULT_BIN})")
    parser.add_argument("--engine-option", action="append", metavar="KEY=VALUE",
                        help="an EngineConfig field for haltwise (repeatable)")
    shape = parser.add_argument_group("shape (default: Qwen3-30B-A3B's; smaller only to test the program)")
    for f in fields(MoeShape):
        flag = "--" + f.name.replace("_", "-")
        shape.add_argument(flag, type=type(f.default), default=f.default, dest=f"shape_{f.name}")


def run(args: argparse.Namespace) -> int:
    directory = llama_cpp.bin_dir(args.llama_bin)
    if missing := llama_cpp.missing_binaries(directory, PEER_BINARIES):
        print(f"llama.cpp's {', '.join(missing)} not found in {directory}: `make bench-setup` builds them "
              f"(or point HALTWISE_LLAMA_CPP_BIN / --llama-bin at a build holding them)")
        return 2
    if not 0 <= args.base_layers < args.layers:
        print(f"--base-layers {args.base_layers} must be in 0..{args.layers - 1}")
        return 2
    shape = MoeShape(**{f.name: getattr(args, f"shape_{f.name}") for f in fields(MoeShape)})
    progress = Progress()
    depths = [d for d in (args.base_layers, args.layers) if d]
    files = {d: build(shape, d, directory / "llama-quantize", progress) for d in depths}
    streams = tuple(sorted(set(args.streams)))
    options = common.parse_engine_options(args.engine_option)
    rates: dict[tuple[str, int, int], list[float]] = {}         # (system, layers, streams) -> tokens/s runs
    for turn in range(args.repeats):
        for i, depth in enumerate(depths):
            for system in SYSTEMS[:: 1 if (turn + i) % 2 == 0 else -1]:
                progress(f"{system}: {depth}-layer file, streams {streams}, run {turn + 1}/{args.repeats}")
                if system == "haltwise":
                    got = haltwise_rates(files[depth], streams, args, options)
                else:
                    got = llama_cpp.batched_bench(directory, files[depth], args.threads, args.prompt_tokens,
                                                  args.decode_tokens, streams)
                for n in streams:
                    rates.setdefault((system, depth, n), []).append(got[n])
    records = per_layer_records(rates, args.layers, args.base_layers, streams)
    print(table(records, args, files[args.layers]))
    print(LEGEND)
    common.write_json(args.json, {"benchmark": "moe", "environment": common.environment(), "shape": asdict(shape),
                                  "layers": args.layers, "base_layers": args.base_layers, "threads": args.threads,
                                  "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
                                  "repeats": args.repeats, "files": {d: str(p) for d, p in files.items()},
                                  "tensor_types": tensor_types(files[args.layers], args.layers), "records": records})
    return 0


def haltwise_rates(path: Path, streams: tuple[int, ...], args: argparse.Namespace,
                   options: dict[str, Any]) -> dict[int, float]:
    """Decode tokens/s of all streams together, per stream count, on a fresh engine over the file."""
    import torch

    from haltwise.llm import LLM
    from haltwise_bench.haltwise_runner import HaltwiseRunner

    torch.set_num_threads(args.threads)
    # no prompt lookup: llama-batched-bench decodes one token a step, and a random model's repetitive output
    # would have drafts accepted (the layer's time is what is compared); --engine-option turns it back on
    llm = LLM(str(path), dtype="auto", **{"num_threads": args.threads, "speculative_tokens": 0, **options})
    runner = HaltwiseRunner(llm.engine)
    prompts = token_prompts(llm.tokenizer, max(streams), args.prompt_tokens)
    out = {}
    for n in streams:
        runner.generate(prompts[:n], 2)                                     # warm-up for this batch, untimed
        out[n] = runner.generate(prompts[:n], args.decode_tokens).decode_tokens_per_s
    del runner, llm
    gc.collect()
    return out


def per_layer_records(rates: dict[tuple[str, int, int], list[float]], layers: int, base: int,
                      streams: tuple[int, ...]) -> list[dict[str, Any]]:
    """One row per (streams, system): tokens/s, step ms per file, a layer's ms, ratio = peer ms / haltwise ms."""
    rows = []
    for n in streams:
        for system in SYSTEMS:
            rate = {d: median(rates[(system, d, n)]) for d in (base, layers) if d}
            step = {d: n * 1000.0 / r for d, r in rate.items()}
            layer_ms = (step[layers] - step[base]) / (layers - base) if base else step[layers] / layers
            rows.append({"system": system, "streams": n, "tokens_per_s": rate[layers],
                         "step_ms": step[layers], "base_step_ms": step.get(base), "layer_ms": layer_ms,
                         "runs": {d: rates[(system, d, n)] for d in rate}, "ratio": None, "step_ratio": None})
        ours, peer = rows[-2], rows[-1]
        positive = ours["layer_ms"] > 0 and peer["layer_ms"] > 0      # noise can make a difference negative
        for row in (ours, peer):
            row["ratio"] = peer["layer_ms"] / ours["layer_ms"] if positive else None
            row["step_ratio"] = peer["step_ms"] / ours["step_ms"]
    return rows


def tensor_types(path: Path, layers: int) -> dict[str, str]:
    """The first and last layers' and the head's tensor types as llama-quantize wrote them (GGUF names)."""
    from gguf import GGUFReader

    kept = ("blk.0.", f"blk.{layers - 1}.")
    return {t.name: t.tensor_type.name for t in GGUFReader(path).tensors
            if not t.name.startswith("blk.") or t.name.startswith(kept)}


def table(records: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> str:
    per = "per layer" if args.base_layers else "per layer (whole step / layers: lm_head included)"
    head = (f"{'streams':>7} {'system':<10} {'tok/s':>8} {'step ms':>9} {'base ms':>9} {'layer ms':>9} "
            f"{'ratio':>6} {'step ratio':>10}")
    lines = [f"MoE decode, Qwen3-30B-A3B layer shapes, {args.layers} vs {args.base_layers} layers, "
             f"{args.threads} threads each, {per}; file {path.name}", head, "-" * len(head)]
    for r in records:
        base = "-" if r["base_step_ms"] is None else f"{r['base_step_ms']:.1f}"
        lines.append(f"{r['streams']:>7} {r['system']:<10} {r['tokens_per_s']:>8.2f} {r['step_ms']:>9.1f} "
                     f"{base:>9} {r['layer_ms']:>9.2f} {_f(r['ratio']):>6} {_f(r['step_ratio']):>10}")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


LEGEND = """\
tok/s: decode tokens/s of all streams together (file with --layers); step ms: one decode step of that many rows;
base ms: the same on the --base-layers file; layer ms: (step - base) / (layers - base), one MoE layer's share;
ratio: llama.cpp layer ms / haltwise layer ms (> 1: haltwise faster; goals 1.0 at 1 stream, 2 at 8); step ratio:
the same on whole steps. haltwise: --dtype auto (default flags), int8 KV; llama.cpp: llama-batched-bench, its
default f16 KV. Medians over repeats."""
