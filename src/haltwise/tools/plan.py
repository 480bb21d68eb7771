"""`haltwise plan`: print the kernel plan for a model on this host (measured now, or read from the cache)."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file or Hugging Face directory (default: SmolLM2)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--remeasure", action="store_true", help="ignore the cached plan and measure again")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--nondeterministic-kernels", action="store_true",
                   help="the opt-in plan: the fastest format per row bucket (default: the batch-invariant plan "
                        "`haltwise serve` uses, one format per linear)")


def run(args: argparse.Namespace) -> int:
    import torch

    from haltwise.kernels import plan_cache
    from haltwise.kernels.model_plan import plan_model
    from haltwise.models.loader import ModelLoadError, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = load_model(args.model, dtype="float32", mapped=True)   # as serve: linears stay in the file
    except ModelLoadError as e:
        print(f"haltwise plan: {e}", file=sys.stderr)
        return 2
    plan, counts = plan_model(loaded.model, loaded.path, use_cache=not args.remeasure,
                              batch_invariant=not args.nondeterministic_kernels)
    if args.remeasure:
        plan_cache.store(plan)
    if args.json:
        print(json.dumps(plan.to_json() | {"linears_per_format": counts}, indent=1))
    else:
        print(plan.describe())
        print(f"  linears per format: {counts}")
    return 0
