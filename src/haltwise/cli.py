"""`haltwise` command line: one subcommand per tool; each lives in its own module."""
from __future__ import annotations

import argparse
import importlib
import sys

from haltwise.paused_gc import paused_gc

# name -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS = {
    "serve": ("haltwise.server.serve", "serve the OpenAI-compatible HTTP API"),
    "generate": ("haltwise.tools.generate", "generate text for one prompt, streamed to stdout"),
    "count-tokens": ("haltwise.tools.count_tokens", "count a text's tokens against the model's window"),
    "kv-estimate": ("haltwise.tools.kv_estimate", "compute KV-cache memory for a model or given dimensions"),
    "plan": ("haltwise.tools.plan", "print the kernel plan: the linear format measured fastest per shape and rows here"),
    "bench": ("haltwise.bench.cli", "benchmarks: haltwise side by side with peers, ratios in one run"),
    "eval-stops": ("haltwise.bench.eval_stops", "compare stop strategies over a prompt set"),
    "eval-tools": ("haltwise.bench.eval_tools", "tool calls: do they parse, validate and name the right tool "
                                                "(haltwise vs llama-server --jinja)"),
    "eval-structured": ("haltwise.bench.eval_structured", "structured outputs and tool calls: ended by themselves, "
                                                           "closed by the server, or cut (before/after)"),
    "eval-longctx": ("haltwise.bench.eval_longctx", "long-context perplexity and passkey retrieval per RoPE scaling"),
    "eval-surfaces": ("haltwise.bench.eval_surfaces", "Anthropic Messages / OpenAI Responses checks, haltwise "
                                                       "beside llama-server --jinja"),
    "eval-kv": ("haltwise.bench.eval_kv", "quality cost of each KV cache dtype vs float32 KV on the default path"),
    "stress": ("haltwise.bench.stress", "load a running server with a hostile mix of clients and report"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand listed; `only` (the command being run): import just its module for its options
    (importing every tool's module cost `haltwise serve` ~1 s of its start). None: all of them."""
    parser = argparse.ArgumentParser(prog="haltwise", description="haltwise: an LLM inference server whose every generation ends for a reason it can name.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(module=module)
        if only is not None and name != only:
            continue
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as e:  # a tool whose optional dependency is missing still lists itself
            p.set_defaults(missing=str(e))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with paused_gc(freeze=True):    # the command's imports (torch, FastAPI) make objects that stay (paused_gc.py)
        parser = build_parser(only=argv[0] if argv and argv[0] in COMMANDS else "")
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
