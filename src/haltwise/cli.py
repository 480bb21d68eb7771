"""`haltwise` command line: one subcommand per tool; each lives in its own module."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from haltwise.paused_gc import paused_gc

# name -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS = {
    "serve": ("haltwise.server.serve", "serve the OpenAI-compatible HTTP API"),
    "generate": ("haltwise.tools.generate", "generate text for one prompt, streamed to stdout"),
    "models": ("haltwise.tools.models", "list a running server's models and their status; load or unload one"),
    "count-tokens": ("haltwise.tools.count_tokens", "count a text's tokens against the model's window"),
    "kv-estimate": ("haltwise.tools.kv_estimate", "compute KV-cache memory for a model or given dimensions"),
    "plan": ("haltwise.tools.plan",
             "print the kernel plan: the linear format measured fastest per shape and rows here"),
    "bench": ("haltwise_bench.cli", "benchmarks: haltwise side by side with peers, ratios in one run"),
    "eval-stops": ("haltwise_bench.eval_stops", "compare stop strategies over a prompt set"),
    "eval-tools": ("haltwise_bench.eval_tools", "tool calls: do they parse, validate and name the right tool "
                                                "(haltwise vs llama-server --jinja)"),
    "eval-structured": ("haltwise_bench.eval_structured", "structured outputs and tool calls: ended by themselves, "
                                                          "closed by the server, or cut (before/after)"),
    "eval-longctx": ("haltwise_bench.eval_longctx", "long-context perplexity and passkey retrieval per RoPE scaling"),
    "eval-surfaces": ("haltwise_bench.eval_surfaces", "Anthropic Messages / OpenAI Responses checks, haltwise "
                                                       "beside llama-server --jinja"),
    "eval-kv": ("haltwise_bench.eval_kv", "quality cost of each KV cache dtype vs float32 KV on the default path"),
    "stress": ("haltwise_bench.stress", "load a running server with a hostile mix of clients and report"),
}

# The benchmark commands live in the haltwise_bench package and need the `bench` extra; the server never imports them.
BENCH_NEEDS = ("haltwise_bench", "matplotlib", "httpx")
BENCH_HINT = "pip install 'haltwise[bench]' (or `make setup`)"


def missing_extra(module: str) -> str | None:
    """For a benchmark command: why it cannot run here (a module of the bench extra is not installed); else None."""
    if not module.startswith("haltwise_bench."):
        return None
    absent = [name for name in BENCH_NEEDS if importlib.util.find_spec(name) is None]
    return f"{', '.join(absent)} not installed; {BENCH_HINT}" if absent else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand listed; `only` (the command being run): import just its module for its options
    (importing every tool's module cost `haltwise serve` ~1 s of its start). None: all of them."""
    parser = argparse.ArgumentParser(prog="haltwise", description="haltwise: an LLM inference server whose every "
                                                                  "generation ends for a reason it can name.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(module=module)
        if only is not None and name != only:
            continue
        missing = missing_extra(module)
        if missing:  # a tool whose extra is not installed still lists itself, and says how to install it
            p.set_defaults(missing=missing)
            continue
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as e:
            hint = f"; {BENCH_HINT}" if module.startswith("haltwise_bench.") else ""
            p.set_defaults(missing=f"{e}{hint}")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    missing = command and missing_extra(COMMANDS[command][0])
    if missing:  # before parsing: its options (subcommands included) come from the module that is absent
        print(f"haltwise {command}: unavailable ({missing})", file=sys.stderr)
        return 2
    with paused_gc(freeze=True):    # the command's imports (torch, FastAPI) make objects that stay (paused_gc.py)
        parser = build_parser(only=command or "")
        args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    if getattr(args, "missing", None):
        print(f"haltwise {args.command}: unavailable ({args.missing})", file=sys.stderr)
        return 2
    return int(importlib.import_module(args.module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
