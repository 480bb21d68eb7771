"""`haltwise bench {engine,peers,stops}`: one entry point for the benchmark programs.

  engine  haltwise vs Hugging Face transformers in one process (bench/engine_bench.py)
  peers   haltwise vs llama.cpp (llama-bench in-process figures, llama-server over HTTP), same GGUF (bench/peers.py)
  stops   per-token cost of stop-string checking (bench/stop_cost.py; its own options follow)
  termination  share of a real decode step spent on termination checks (bench/termination_share.py);
               --grammar: the grammar mask's cost against the default decode step at 1 and 32 rows
  neighbour    decode quiet vs beside busy processes, same run (bench/neighbour.py)
  footprint    start -> ready and peak RSS vs llama-server at the same KV capacity (bench/footprint.py)
  kv           decode throughput per KV cache dtype at 1 and 32 clients (bench/kv_speed.py)
  models       several models from one server: first-request TTFT, switch time (models_bench.py)
  spec         speculative decoding off vs on: decode tok/s, ratio, acceptance (bench/spec_bench.py)
  floor        single-stream decode against this host's memory-bandwidth floor, speculation off and on (floor.py)
  longprompt   time to first token of 8k/16k prompts and the token gaps of decodes beside them
               (long_prompt.py)
  prompt-cache TTFT cold / from the pool / from RAM / from disk of a 2k and an 8k prompt (prompt_cache_bench.py)
  kernels      native GGUF kernels on a model's real weights, plain rows vs X8 records, or X8 records on two ISA
               paths (--isas avx2,avx512vnni) (bench/kernel_shapes.py)
  moe          MoE decode per layer at Qwen3-30B-A3B's real shapes (random weights, Q4_K_M by llama-quantize)
               vs llama-batched-bench at 1 and 8 streams, same file (bench/moe_bench.py)
  moe-large    a MoE model larger than half the memory (Qwen3-30B-A3B's shapes): start, memory held, decode,
               beside llama-server on the same file (bench/moe_large.py)

Results go to stdout as a table; progress goes to stderr while it runs.
"""
from __future__ import annotations

import argparse
import importlib

PROGRAMS = {
    "engine": ("haltwise_bench.engine_bench", "haltwise vs transformers, same GGUF, same process"),
    "peers": ("haltwise_bench.peers", "haltwise vs llama.cpp's own llama-bench and llama-server -np N, same GGUF "
                                      "(--model: a file or a named model)"),
    "stops": ("haltwise_bench.stop_cost", "stop-string checking cost per token (options: see --help)"),
    "termination": ("haltwise_bench.termination_share", "share of a decode step spent on termination checks "
                                                          "(--grammar: mask cost vs the default decode step)"),
    "neighbour": ("haltwise_bench.neighbour", "decode tok/s quiet vs beside one busy process per spare core"),
    "footprint": ("haltwise_bench.footprint", "start -> ready and peak RSS vs llama-server at the same KV capacity"),
    "kv": ("haltwise_bench.kv_speed",
           "decode throughput per KV cache dtype at 1 and 32 clients, same weights, same run"),
    "models": ("haltwise_bench.models_bench", "several models from one server: first-request TTFT (cold/warm page "
                                              "cache), switch time, loaded TTFT"),
    "spec": ("haltwise_bench.spec_bench", "prompt-lookup speculative decoding off vs on, same engine, alternating"),
    "floor": ("haltwise_bench.floor", "single-stream decode tok/s against the host's read-bandwidth floor "
                                      "(bytes a token / measured bandwidth), speculation off and on"),
    "longprompt": ("haltwise_bench.long_prompt", "TTFT of long prompts and the token gaps of decode streams "
                                                 "beside that prefill (--server-src: before/after)"),
    "prompt-cache": ("haltwise_bench.prompt_cache_bench", "TTFT of a 2k and an 8k prompt cold, from the pool, "
                                                          "from RAM, from disk (llama-server --cache-ram beside)"),
    "kernels": ("haltwise_bench.kernel_shapes", "native kernels on a model's real weights: plain rows vs X8 records, "
                                               "or two ISA paths (--isas)"),
    "moe": ("haltwise_bench.moe_bench", "MoE decode per layer at Qwen3-30B-A3B's real shapes (random weights, "
                                        "Q4_K_M by llama-quantize) vs llama.cpp at 1 and 8 streams, same file"),
    "moe-large": ("haltwise_bench.moe_large", "a MoE model larger than half the memory: start, memory held "
                                              "(anonymous / mapped), decode, beside llama-server on the same file"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="{" + ",".join(PROGRAMS) + "}", required=True)
    for name, (module, help_text) in PROGRAMS.items():
        if name == "stops":
            # stop_cost parses its own argv (including --help): this parser must not claim any "-" option.
            p = sub.add_parser(name, help=help_text, description=help_text, prefix_chars="+", add_help=False)
            p.add_argument("argv", nargs="*", help="options passed to the stop-cost benchmark")
        else:
            p = sub.add_parser(name, help=help_text, description=help_text)
            importlib.import_module(module).add_arguments(p)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(PROGRAMS[args.bench][0])
    if args.bench == "stops":
        return int(module.main(list(args.argv)) or 0)
    return int(module.run(args) or 0)
