"""`haltwise bench kernels --from-dram`: the X8 record kernels reading a model's weights as a decode step
does, from DRAM rather than from cache.

Per tensor kind (the layers' ffn_down, the lm_head, ...), every layer's tensor of that kind is prepared and
the kernels run over all of them in turn, one pass at a time, at each row count; a kind whose tensors fit
the last-level cache many times over (attention projections of small models) measures the cache instead,
which the output says by the megabytes. Printed: the median over --calls passes of the weight bytes read
per second (GB/s), so a lone decode row's rate can be held against the host's read bandwidth (`haltwise
bench floor`). Another run of the program on another kernel build is the before/after (runs alternate;
timings drift between runs on a shared host).
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.gguf.file import GGUFFile
from haltwise.kernels.formats import GGUFShard, LinearSource
from haltwise.kernels.gguf_blocks import block_rows
from haltwise.kernels.native.gguf_format import SUPPORTED, prepare_blocks


def by_kind(path) -> dict[str, list[tuple[int, int, object]]]:
    """kind ("blk.ffn_down.weight") -> [(bytes in the file, input features, prepared X8 blocks)] per layer;
    the embedding only where it is the lm_head too (tied)."""
    kinds: dict[str, list[tuple[int, int, object]]] = {}
    tensors = GGUFFile(path).tensors
    tied = not any(t.name == "output.weight" for t in tensors)          # then token_embd is the lm_head
    for t in tensors:
        if len(t.shape) != 2 or Q(t.tensor_type) not in SUPPORTED or (t.name == "token_embd.weight" and not tied):
            continue
        kind = ".".join(p for p in t.name.split(".") if not p.isdigit())
        rows, cols = int(t.shape[1]), int(t.shape[0])
        shape_only = torch.zeros(1, 1).expand(rows, cols)                 # prepare_blocks reads only the shape
        source = LinearSource(t.name, shape_only, None, [GGUFShard(Q(t.tensor_type), np.array(block_rows(t, rows)),
                                                                   rows)])
        kinds.setdefault(kind, []).append((t.n_bytes, cols, prepare_blocks(source, interleave=True)))
    return kinds


def run(native, path, rows_list: list[int], calls: int, isa: str) -> int:
    print(f"# {path.name}: X8 records on {isa}, {torch.get_num_threads()} threads, every layer's tensor of a "
          f"kind in turn; GB/s of weight bytes, median of {calls} passes")
    print(f"{'tensor kind':<28}{'tensors':>8}{'MB':>8}" + "".join(f"{f'{r} rows GB/s':>15}" for r in rows_list))
    for kind, tensors in by_kind(path).items():
        total = sum(n for n, _, _ in tensors)
        cells = []
        for rows in rows_list:
            xs = {k: torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) for _, k, _ in tensors}
            passes = []
            for i in range(calls + 1):                                   # the first pass warms up
                start = time.perf_counter()
                for _, k, p in tensors:
                    native.gemm(p.weights, p.qtypes, p.rows, xs[k], isa)
                if i:
                    passes.append(time.perf_counter() - start)
            cells.append(f"{total / statistics.median(passes) / 1e9:15.1f}")
        print(f"{kind:<28}{len(tensors):>8}{total / 1e6:>8.0f}" + "".join(cells))
        sys.stdout.flush()
    return 0
