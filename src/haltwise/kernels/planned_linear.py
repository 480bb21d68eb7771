"""PlannedLinear: an nn.Linear replacement that multiplies in the plan's format for the step's row count.

The model code never knows which format ran. Only the formats the plan chose for this weight are
prepared; a chosen format that refuses this particular weight (prepare raises) hands its buckets to the
next in that bucket's ranking, and float32 is always the last resort.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Iterator

import torch
from torch import nn

from haltwise.kernels.formats import LinearFormat, LinearSource
from haltwise.kernels.plan import BUCKETS, FALLBACK, KernelPlan, bucket_index

log = logging.getLogger("haltwise.kernels")
_INDEX = [bucket_index(r) for r in range(BUCKETS[-1] + 1)]    # rows -> bucket, for rows <= 256


class PlannedLinear(nn.Module):
    def __init__(self, source: LinearSource, rankings: list[list[str]], formats: dict[str, LinearFormat]):
        """rankings[b]: format names for bucket b, best first (KernelPlan.ranking)."""
        super().__init__()
        self.name = source.name
        self.in_features, self.out_features = source.shape[1], source.shape[0]
        self.bias = None if source.bias is None else nn.Parameter(source.bias.detach().float(), requires_grad=False)
        prepared: dict[str, Any] = {}
        refused: set[str] = set()
        self._by_bucket: list[tuple[LinearFormat, Any]] = []
        for ranking in rankings:
            for name in [*ranking, FALLBACK]:
                if name in refused or name not in formats:
                    continue
                if name not in prepared:
                    try:
                        prepared[name] = formats[name].prepare(source)
                    except Exception as e:              # this weight only: fall through to the next choice
                        log.info("%s: format %s refused this weight (%s)", source.name, name, e)
                        refused.add(name)
                        continue
                self._by_bucket.append((formats[name], prepared[name]))
                break
            else:
                raise RuntimeError(f"{source.name}: no format could prepare this weight")
        self.bucket_formats = [fmt.name for fmt, _ in self._by_bucket]   # for printing and tests

    def by_bucket(self, bucket: int) -> tuple[LinearFormat, Any]:
        """(format, prepared weight) that runs steps of this row bucket."""
        return self._by_bucket[bucket]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) float32 -> (..., out) float32."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)                              # (rows, in)
        rows = x2.shape[0]
        if rows == 0:
            y = x2.new_zeros(0, self.out_features)
        else:
            fmt, prepared = self._by_bucket[_INDEX[rows] if rows <= BUCKETS[-1] else -1]
            y = fmt.run(prepared, x2.contiguous())                        # (rows, out)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, formats per bucket {self.bucket_formats}"


def linear_sources(model: nn.Module) -> Iterator[tuple[nn.Module, str, LinearSource]]:
    """(parent, attribute, source) for every nn.Linear in the model, named as in model.named_modules().

    lm_head only ever sees the rows being sampled (at most max_num_seqs, 64 by default): its
    max_rows is BUCKETS[-2], so the plan does not time it at 256 rows. A linear whose weight was never
    materialized (a meta tensor: models/loader.py's mapped weights) is read through the model's
    `load_linear_weight(name)` when a format or the plan needs its float32 values (`.rows(name, ids)`: only
    some output rows, for verification).
    """
    load = getattr(model, "load_linear_weight", None)
    load_rows = getattr(load, "rows", None)
    for parent_name, parent in list(model.named_modules()):
        for attr, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                name = f"{parent_name}.{attr}" if parent_name else attr
                yield parent, attr, LinearSource(name, child.weight.detach(),
                                                 None if child.bias is None else child.bias.detach(),
                                                 max_rows=BUCKETS[-2] if attr == "lm_head" else None,
                                                 load_weight=partial(load, name) if load is not None else None,
                                                 load_rows=partial(load_rows, name) if load_rows is not None else None)


def apply_plan(model: nn.Module, plan: KernelPlan, formats: dict[str, LinearFormat],
               sources: list[tuple[nn.Module, str, LinearSource]] | None = None) -> dict[str, int]:
    """Swap every nn.Linear for a PlannedLinear. Returns how many linears run each format anywhere,
    e.g. {'int4-wo': 120, 'float32': 121}.

    The layers are prepared on torch's intra-op thread count at once: preparing is mostly copies that free
    the GIL (the X8 regrouping, repack.py), and each layer's result depends on its own weight alone
    (Qwen2.5-Coder-0.5B's 97 linears: 0.52-0.86 s on one thread, 0.36-0.46 s on two here)."""
    sources = sources if sources is not None else list(linear_sources(model))

    def planned(source: LinearSource) -> PlannedLinear:
        return PlannedLinear(source, [plan.ranking(source.group_key(), b) for b in range(len(BUCKETS))], formats)

    with ThreadPoolExecutor(max(1, min(torch.get_num_threads(), len(sources)))) as pool:
        layers = list(pool.map(planned, [source for _, _, source in sources]))
    counts: dict[str, int] = {}
    for (parent, attr, _), layer in zip(sources, layers):
        setattr(parent, attr, layer)
        for name in set(layer.bucket_formats):
            counts[name] = counts.get(name, 0) + 1
    return counts
