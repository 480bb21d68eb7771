"""`haltwise bench kernels`: the native GGUF kernels on a model's real weights, plain rows vs row-interleaved
(X8) records (or, with --isas A,B, the X8 records on two ISA paths: e.g. avx2,avx512vnni), per distinct
(tensor kind, block type), at a few row counts.

One process, one native build: for each weight the two layouts are timed alternately, single calls, and
the median of each is printed (a shared host drifts, so only ratios within one run mean anything). The
first tensor of each kind and type stands for the others (e.g. Qwen2.5's ffn_down: one Q4_K, one Q6_K);
`share` is its X8 time times the number of such tensors over the sum of those products: where a decode
step's linear time goes (a tied lm_head counts once).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.formats import GGUFShard, LinearSource
from haltwise.kernels.gguf_blocks import block_rows
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import SUPPORTED, prepare_blocks
from haltwise.gguf.file import GGUFFile


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a GGUF file or a catalog name")
    p.add_argument("--rows", default="1,32", help="activation rows per call, comma-separated")
    p.add_argument("--calls", type=int, default=15, help="timed calls per layout and row count")
    p.add_argument("--from-dram", action="store_true",
                   help="every layer's tensors of a kind in turn (as a decode step reads them): GB/s per row count")
    p.add_argument("--isas", default=None, metavar="A,B",
                   help="compare the X8 records on two ISA paths of this CPU (e.g. avx2,avx512vnni) instead of "
                        "plain rows vs X8 on the widest")


def _sources(path) -> tuple[list[LinearSource], dict[str, int]]:
    """(the first source of each tensor kind and type, kind:type -> how many tensors there are)."""
    counts: dict[str, int] = {}
    out = []
    for t in GGUFFile(path).tensors:
        qtype = Q(t.tensor_type)
        kind = ".".join(p for p in t.name.split(".") if not p.isdigit())
        if len(t.shape) != 2 or qtype not in SUPPORTED:
            continue
        key = f"{kind}:{qtype.name}"
        counts[key] = counts.get(key, 0) + 1
        if counts[key] > 1:
            continue
        rows, cols = int(t.shape[1]), int(t.shape[0])
        shape_only = torch.zeros(1, 1).expand(rows, cols)          # prepare_blocks reads only the shape
        out.append(LinearSource(key, shape_only, None, [GGUFShard(qtype, np.array(block_rows(t, rows)), rows)]))
    if "output.weight" not in {k.split(":")[0] for k in counts}:           # tied: the embedding is the lm_head
        counts = {k: v for k, v in counts.items() if not k.startswith("token_embd")} | \
                 {k: 1 for k in counts if k.startswith("token_embd")}
    else:
        counts = {k: v for k, v in counts.items() if not k.startswith("token_embd")}
    return [s for s in out if s.name in counts], counts


def run(args: argparse.Namespace) -> int:
    from haltwise.models.catalog import resolve_model

    native = build.load()
    if native is None:
        print(f"haltwise: {build.failure()}", file=sys.stderr)
        return 1
    path = resolve_model(args.model, progress=None)
    rows_list = [int(r) for r in args.rows.split(",")]
    if args.from_dram:
        from haltwise_bench import kernel_dram

        return kernel_dram.run(native, path, rows_list, args.calls, native.best_isa())
    isas = args.isas.split(",") if args.isas else [native.best_isa()] * 2
    if len(isas) != 2 or not set(isas) <= set(native.isas()):
        print(f"haltwise: --isas takes two of this CPU's paths: {', '.join(native.isas())}", file=sys.stderr)
        return 2
    header = f"{isas[0]}/{isas[1]}" if args.isas else "plain/X8"
    print(f"# {path.name}: {header} on {torch.get_num_threads()} threads; median ms of {args.calls} calls")
    sources, counts = _sources(path)
    print(f"{'tensor':<30}{'out x in':>13}" + "".join(f"{f'{r} rows {header} ms':>27}" for r in rows_list))
    x8_ms: dict[str, list[float]] = {}
    for source in sources:
        x8 = prepare_blocks(source, interleave=True)
        layouts = [x8 if args.isas else prepare_blocks(source, interleave=False), x8]
        cells = []
        for rows in rows_list:
            x = torch.randn(rows, source.shape[1], generator=torch.Generator().manual_seed(rows))
            times: list[list[float]] = [[], []]
            for i in range(args.calls + 1):                           # the first call of each warms up
                for j, (p, isa) in enumerate(zip(layouts, isas)):
                    start = time.perf_counter()
                    native.gemm(p.weights, p.qtypes, p.rows, x, isa)
                    if i:
                        times[j].append((time.perf_counter() - start) * 1e3)
            first, second = (statistics.median(t) for t in times)
            x8_ms.setdefault(source.name, []).append(second)
            cells.append(f"{first:9.3f} /{second:8.3f} ({first / second:.2f}x)")
        shape = f"{source.shape[0]}x{source.shape[1]}"
        print(f"{f'{source.name} x{counts[source.name]}':<30}{shape:>13}" + "".join(f"{c:>27}" for c in cells))
        sys.stdout.flush()
    for i, rows in enumerate(rows_list):
        total = sum(ms[i] * counts[name] for name, ms in x8_ms.items())
        shares = ", ".join(f"{name} {ms[i] * counts[name] / total:.0%}" for name, ms in x8_ms.items())
        print(f"share of the step's linear time at {rows} rows (X8 on {isas[1]}, {total:.1f} ms): {shares}")
    return 0
