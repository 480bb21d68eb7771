"""Verify the plan where it runs: every linear, every row bucket, on activations of a real forward pass.

When a plan is measured (and once for a cached plan that carries no verdict), before any request:
  1. models/calibration.py runs the planned model once (Python layers) over a calibration text and
     records each linear's input rows -- the model's real activations, outlier channels included.
  2. `verify_linear` runs the linear's planned format at the row buckets it can see (rows tiled from the
     captured ones up to 256; for batch-invariant formats 1, 2, 4, 8 and 64: INVARIANT_ROWS, TILE_ROWS;
     lm_head up to its max_rows) and holds each output to the format's own `error_bound` against float32
     F.linear (on a large linear, a sample of its output rows: reference_rows.checked_rows). A
     batch-invariant format must also give every row the same bits at every bucket it runs.
  3. A linear that fails is re-planned onto float32-native (else float32) for every bucket, with a warning
     naming the cell and the error.
The reference and the bound are computed once per linear, at the largest bucket; a smaller bucket's rows
are a prefix of it. The verdict (VerifyReport, failures included) is cached with the plan: a later start
on the same native build, host and model file (plan_cache's key) applies its fallbacks without verifying
again (kernels/model_plan.py).
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from haltwise.kernels.formats import LinearSource
from haltwise.kernels.plan import BUCKETS, VerifyReport, bucket_index
from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.kernels.reference_rows import checked_rows

log = logging.getLogger("haltwise.kernels")
# A linear whose every bucket runs a batch-invariant format is checked up to 64 rows: that runs every code
# path its kernels have (the 1-8 row tiles, the pair order, a whole 64-row span); a 256-row call runs the
# same code over more tiles and gives each row the bits it gets at 64 rows (batch invariance, which
# tests/kernels/native/test_batch_invariance.py checks per block type and ISA path at 1..257 rows), so
# the same bound. The 256-row bucket was half of the 1.5B's verification (a first start: 14 of 30 s).
INVARIANT_ROWS = 64
# Of those buckets, a batch-invariant linear runs the ones of at most TILE_ROWS rows and its top one: every
# kernel's row-count thresholds are at most 16 (tiles of 1-8 rows; the pair and span orders from 8 or 16
# rows), so the top bucket runs the code the 16- and 32-row buckets run, and gives each row the bits they
# give it (batch invariance, checked per block type and ISA path at 1..257 rows by the test above). The two
# skipped buckets were ~1 s of the 1.5B's 9-10 s first start.
TILE_ROWS = 8

def invariant(layer: PlannedLinear) -> bool:
    """Whether every bucket of the linear runs a batch-invariant format (the default plan)."""
    return all(layer.by_bucket(b)[0].batch_invariant for b in range(len(BUCKETS)))


def checked_buckets(layer: PlannedLinear, max_rows: int | None = None) -> list[int]:
    """The bucket indices verification runs for a linear that sees at most max_rows rows."""
    last = bucket_index(max_rows) if max_rows else len(BUCKETS) - 1
    every = not invariant(layer)
    return [b for b in range(last + 1) if every or BUCKETS[b] <= TILE_ROWS or b == last]


def _rows(captured: torch.Tensor, rows: int) -> torch.Tensor:
    reps = -(-rows // captured.shape[0])
    return captured.repeat(reps, 1)[:rows].contiguous()


def verify_linear(layer: PlannedLinear, weight: torch.Tensor, captured: torch.Tensor,
                  max_rows: int | None = None, out_rows: torch.Tensor | None = None) -> tuple[float, str | None]:
    """(worst error / bound, why it failed or None) over the buckets this linear sees. weight: the float32
    weights of the output rows `out_rows` (None: all of them, in order), the ones whose values are checked."""
    buckets = checked_buckets(layer, max_rows)
    top = BUCKETS[buckets[-1]]
    x = _rows(captured, top)
    unique = captured[:top]                              # x repeats these rows: reference and bounds (row-wise)
    w = weight.float()                                  # are computed once per distinct row, then tiled
    abs_unique = unique.abs() @ w.abs().T
    ref = _rows(F.linear(unique, w), top)                               # (rows, checked out)
    bounds: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}
    worst = 0.0
    for b in buckets:
        fmt, prepared = layer.by_bucket(b)
        if fmt.name not in bounds:
            bounds[fmt.name] = _rows(fmt.error_bound(unique, w, abs_unique), top)
        rows = BUCKETS[b]
        y = fmt.run(prepared, x[:rows])
        err = (y if out_rows is None else y[:, out_rows]) - ref[:rows]
        err = err.abs()
        ratio = err / bounds[fmt.name][:rows].clamp(min=1e-30)
        worst_here = float(ratio.max()) if bool(torch.isfinite(y).all()) else float("inf")
        worst = max(worst, worst_here)
        if not worst_here <= 1.0:
            n = int(ratio.flatten().argmax()) if bool(torch.isfinite(ratio).all()) else 0
            return worst, (f"{fmt.name} at {rows} rows: |error| {float(err.flatten()[n]):.3g} > bound "
                           f"{float(bounds[fmt.name][:rows].flatten()[n]):.3g}")
        if fmt.batch_invariant:
            seen = outputs.setdefault(fmt.name, y)
            common = min(seen.shape[0], rows)
            if not torch.equal(seen[:common], y[:common]):
                return worst, f"{fmt.name} is not batch invariant: rows differ between {seen.shape[0]} and {rows} rows"
            if y.shape[0] > seen.shape[0]:
                outputs[fmt.name] = y
    return worst, None


def verify_model(model: nn.Module, sources: dict[str, LinearSource], captured: dict[str, torch.Tensor], replan,
                 max_rows: int = BUCKETS[-1]) -> VerifyReport:
    """Check every PlannedLinear of the model up to max_rows; replan(name) swaps a failing one for its fallback.

    sources: linear name -> its LinearSource (float32 weight, the most rows it ever sees). A weight
    dequantized on demand is released after its linear is checked: one float32 weight lives at a time."""
    report = VerifyReport()
    for name, layer in list(model.named_modules()):
        if not isinstance(layer, PlannedLinear) or name not in captured:
            continue
        source = sources[name]
        rows = min(source.max_rows or BUCKETS[-1], max_rows)
        if invariant(layer):
            rows = min(rows, INVARIANT_ROWS)
        out_rows = checked_rows(*source.shape)
        weight = source.weight_rows(out_rows) if len(out_rows) < source.shape[0] else source.weight
        worst, why = verify_linear(layer, weight, captured[name], rows,
                                   out_rows if len(out_rows) < source.shape[0] else None)
        source.release()
        report.checked += len(checked_buckets(layer, rows))
        report.worst = max(report.worst, worst if why is None else report.worst)
        if why is not None:
            report.failures[name] = why
            log.warning("kernel plan: %s failed verification (%s); it runs %s instead", name, why, replan(name))
    return report
