"""The kernel plan: per distinct weight (shape and kind) and row bucket, the fastest correct format here.

Measuring: for each group of equal-keyed sources (LinearSource.group_key), one representative is
prepared in every registered format. A format is excluded on this host when it is unavailable, when
prepare or run raises, or when its output disagrees with float32 F.linear by more than its tolerance
(max|y - y_ref| / max|y_ref| on random inputs of 1 and 33 rows). The rest are timed at each bucket's row
count, interleaved single calls, the fastest of a few (a loaded host only ever adds time: on a shared 2-core
machine medians swung 100x between runs while minimums held). A busy host can still spoil every sample
of a cell (a 2-thread call whose second thread waits a whole time slice), so cells that break what any
matmul obeys -- more rows never take less time, and time per row never grows with the rows -- are timed
again (RETIMES rounds, the minimum kept), and so is a format before it is dropped for being more than
DROP_FACTOR slower than the best at a bucket (it is then not timed at larger buckets: its time only grows).
A plan whose cells are still implausible after that is marked `noisy` and not cached. A source with
`max_rows` (lm_head: only sampled rows reach it) is not timed beyond the bucket that covers them.
Each bucket keeps its measured formats ranked fastest first; PlannedLinear takes the first it can
prepare, and float32 always remains.

The batch-invariant plan (the default path): each group gets ONE batch-invariant format for every bucket
(`GroupPlan.fixed`), so a row's result never depends on how many rows share its step, which the
per-bucket plan cannot promise (its winners differ by bucket, and so do their roundings). It is chosen
by rule, not timed: the first of the block kernels (gguf-q8-native: the file's own blocks, q8
activations) that runs and passes `check`, else the float32 last resort (INVARIANT_FALLBACKS:
float32-native, the format for weights without a block kernel). The float32 format computes the same
dot products from the dequantized weights, 3.5-8x the bytes a row and float32 multiply-adds instead of
int8 dot-product instructions; every plan measured on the hosts seen here (Zen 3, Zen 4, Sapphire
Rapids class; every model of the catalog; 1 to 256+ rows) picked the block kernel for every linear, and
timing the pair was a sixth of a first start (the 1.5B: 5 of 30 s). So it is no longer timed.
"""
from __future__ import annotations

import bisect
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable

import torch
import torch.nn.functional as F

from haltwise.kernels.formats import LinearFormat, LinearSource, registry_version
from haltwise.kernels.host import HostInfo
from haltwise.kernels.reference_rows import checked_rows

log = logging.getLogger("haltwise.kernels")
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 256)   # a step of r rows uses the smallest bucket >= r (256 for > 64)
DROP_FACTOR = 3.0
SAMPLES = 7                               # single timed calls per format and bucket, the fastest kept ...
SAMPLE_BUDGET_MS = 30.0                   # ... but past 2 calls, none once a format has spent this long
RETIMES = 3                               # extra rounds for implausible cells
PLAUSIBLE_SLACK = 2.0                     # tolerated breach of the two rules above (timer noise, cache effects)
CHECK_ROWS = (1, 33)
FALLBACK = "float32"
INVARIANT_FALLBACKS = ("float32-native",)  # the batch-invariant plan's last resort before FALLBACK


def bucket_index(rows: int) -> int:
    return min(bisect.bisect_left(BUCKETS, rows), len(BUCKETS) - 1)


@dataclass
class GroupPlan:
    key: str                                     # LinearSource.group_key()
    count: int                                   # sources in the group
    excluded: dict[str, str] = field(default_factory=dict)              # format -> why
    ms: dict[str, list[float | None]] = field(default_factory=dict)     # format -> per bucket (None: not timed)
    fixed: str | None = None                     # batch-invariant plan: the one format of every bucket

    def ranking(self, bucket: int) -> list[str]:
        if self.fixed:
            return [self.fixed, *(n for n in INVARIANT_FALLBACKS if n != self.fixed)]
        timed = [(t[bucket], name) for name, t in self.ms.items() if t[bucket] is not None]
        return [name for _, name in sorted(timed)] or [FALLBACK]


@dataclass
class VerifyReport:
    """The verification's verdict on an applied plan (kernels/verify.py), cached with the plan."""
    checked: int = 0                                     # (linear, bucket) cells checked
    worst: float = 0.0                                   # largest max|y - ref| / bound over all cells
    failures: dict[str, str] = field(default_factory=dict)   # linear name -> why (it runs the fallback)


@dataclass
class KernelPlan:
    host: dict                                   # HostInfo fields, for printing
    cache_key: str
    groups: dict[str, GroupPlan]
    measure_s: float
    from_cache: bool = False
    noisy: list[str] = field(default_factory=list)   # "group:format:bucket" cells still implausible
    batch_invariant: bool = False                    # every group runs one batch-invariant format
    verified: VerifyReport | None = None             # None until verified (a cached plan keeps its verdict)
    def ranking(self, group_key: str, bucket: int) -> list[str]:
        group = self.groups.get(group_key)
        return group.ranking(bucket) if group else [FALLBACK]

    def chosen(self) -> dict[str, list[str]]:
        """group key -> the winning format per bucket."""
        return {k: [g.ranking(b)[0] for b in range(len(BUCKETS))] for k, g in self.groups.items()}

    def describe(self) -> str:
        h = self.host
        how = "cached" if self.from_cache else f"measured in {self.measure_s:.1f}s"
        how += ", batch-invariant: one format per linear" if self.batch_invariant else ", fastest per row bucket"
        rows = []
        for key, g in self.groups.items():
            cells = []
            for b in range(len(BUCKETS)):
                name = g.ranking(b)[0]
                t = g.ms.get(name, [None] * len(BUCKETS))[b]
                cells.append(f"{name} {t:.3f}" if t is not None else name)
            rows.append((f"  {key} x{g.count}: ", cells))
        width = max([16, *(len(c) + 2 for _, cells in rows for c in cells)])   # cells never run together
        lines = [f"kernel plan ({how}) for {h['cpu_model']}, {h['isa']} (torch {h['torch_version']}, "
                 f"capability {h['torch_capability']}, {h['threads']} threads)",
                 "  rows:" + "".join(f"{b:>{width}}" for b in BUCKETS[:-1]) + f"{str(BUCKETS[-1]) + '+':>{width}}"]
        lines += [head + "".join(f"{c:>{width}}" for c in cells) + "  (ms)" for head, cells in rows]
        excluded: dict[str, list[str]] = {}                 # "format: why" -> groups
        for key, g in self.groups.items():
            for n, why in g.excluded.items():
                excluded.setdefault(f"{n}: {why}", []).append(key)
        every = len(self.groups)
        lines += [f"  excluded {e}" + ("" if len(keys) == every else f" ({', '.join(keys)})")
                  for e, keys in sorted(excluded.items())]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"host": self.host, "cache_key": self.cache_key, "measure_s": self.measure_s,
                "buckets": list(BUCKETS), "batch_invariant": self.batch_invariant,
                "groups": {k: asdict(g) for k, g in self.groups.items()},
                "verified": asdict(self.verified) if self.verified is not None else None}

    @classmethod
    def from_json(cls, data: dict) -> "KernelPlan":
        if data.get("buckets") != list(BUCKETS):
            raise ValueError("plan was measured for other row buckets")
        groups = {k: GroupPlan(**g) for k, g in data["groups"].items()}
        verified = VerifyReport(**data["verified"]) if data.get("verified") else None
        return cls(data["host"], data["cache_key"], groups, data["measure_s"], from_cache=True,
                   batch_invariant=bool(data.get("batch_invariant")), verified=verified)


def check(fmt: LinearFormat, prepared, source: LinearSource) -> str | None:
    """Why the format's numbers are wrong for this source, or None when they agree with float32 (on the
    output rows reference_rows.checked_rows picks: a large weight is never dequantized whole here)."""
    gen = torch.Generator().manual_seed(0)
    out_rows = checked_rows(*source.shape)
    sampled = len(out_rows) < source.shape[0]
    weight = (source.weight_rows(out_rows) if sampled else source.weight).float()
    for rows in CHECK_ROWS:
        x = torch.randn(rows, source.shape[1], generator=gen)
        ref = F.linear(x, weight)
        y = fmt.run(prepared, x)
        if tuple(y.shape) != (rows, source.shape[0]) or y.dtype != torch.float32:
            return f"returned {tuple(y.shape)} {y.dtype}, expected {(rows, source.shape[0])} float32"
        err = (((y[:, out_rows] if sampled else y) - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()
        if not err <= fmt.tolerance:            # also catches NaN
            return f"max relative error {err:.3g} > tolerance {fmt.tolerance:g} at {rows} rows"
    return None


def _call_ms(fmt: LinearFormat, prepared, x: torch.Tensor) -> float:
    start = time.perf_counter()
    fmt.run(prepared, x)
    return (time.perf_counter() - start) * 1e3


def measure_group(key: str, sources: list[LinearSource], formats: Iterable[LinearFormat], host: HostInfo,
                  samples: int = SAMPLES, first_live: bool = False) -> GroupPlan:
    """first_live: stop at the first format that runs and passes `check`, fix it, and time nothing."""
    source = sources[0]
    plan = GroupPlan(key, len(sources))
    live: dict[str, tuple[LinearFormat, object]] = {}
    for fmt in formats:
        if first_live and live:
            break
        try:
            why = fmt.unavailable(host)
            if why is None:
                prepared = fmt.prepare(source)
                why = check(fmt, prepared, source)
        except Exception as e:                                   # any failure excludes the format, with why
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        if why is None:
            live[fmt.name] = (fmt, prepared)
            plan.ms[fmt.name] = [None] * len(BUCKETS)
        else:
            plan.excluded[fmt.name] = why
    if first_live:
        plan.fixed = next(iter(live), None)
        return plan
    gen = torch.Generator().manual_seed(1)
    last = bucket_index(max((s.max_rows or BUCKETS[-1]) for s in sources))
    inputs = [torch.randn(rows, source.shape[1], generator=gen) for rows in BUCKETS[:last + 1]]
    timed: dict[str, tuple[LinearFormat, object]] = dict(live)
    for b, x in enumerate(inputs):
        if not live:                                            # nothing can run this group here
            break
        for name, (fmt, prepared) in live.items():              # warm-up call (first-call packing, caches)
            fmt.run(prepared, x)
        _time_cell(plan, live, b, x, samples)
        best = min(plan.ms[n][b] for n in live)
        slow = [n for n in live if plan.ms[n][b] > DROP_FACTOR * best and n != FALLBACK]
        if slow:                                                # confirm before dropping
            _time_cell(plan, {n: live[n] for n in slow}, b, x, samples)
            best = min(plan.ms[n][b] for n in live)
        live = {n: v for n, v in live.items() if plan.ms[n][b] <= DROP_FACTOR * best or n == FALLBACK}
    for _ in range(RETIMES):
        cells = implausible_cells(plan, last)
        for name, b in cells:
            _time_cell(plan, {name: timed[name]}, b, inputs[b], samples)
    for b in range(last + 1, len(BUCKETS)):
        for t in plan.ms.values():
            t[b] = t[last]                                       # rows beyond max_rows never come
    return plan


def _time_cell(plan: GroupPlan, live: dict[str, tuple[LinearFormat, object]], b: int, x: torch.Tensor,
               samples: int) -> None:
    """Interleaved single calls of each live format at bucket b; keeps the minimum with any earlier time."""
    times: dict[str, list[float]] = {n: [] for n in live}
    for i in range(samples):
        for name, (fmt, prepared) in live.items():
            if i < 2 or sum(times[name]) < SAMPLE_BUDGET_MS:
                times[name].append(_call_ms(fmt, prepared, x))
    for name, t in times.items():
        old = plan.ms[name][b]
        plan.ms[name][b] = round(min(t) if old is None else min(old, *t), 4)


def implausible_cells(plan: GroupPlan, last: int) -> list[tuple[str, int]]:
    """(format, bucket) cells breaking monotonicity: slower than the next bucket's (more rows), or
    slower per row than the previous bucket's, each beyond PLAUSIBLE_SLACK."""
    cells = []
    for name, t in plan.ms.items():
        for b in range(last + 1):
            if t[b] is None:
                continue
            after = t[b + 1] if b < last else None
            before = t[b - 1] if b else None
            growth = BUCKETS[b] / BUCKETS[b - 1] if b else 1
            if (after is not None and t[b] > PLAUSIBLE_SLACK * after) or \
               (before is not None and t[b] > PLAUSIBLE_SLACK * growth * before + 0.05):
                cells.append((name, b))
    return cells


def group_sources(sources: Iterable[LinearSource]) -> dict[str, list[LinearSource]]:
    groups: dict[str, list[LinearSource]] = {}
    for s in sources:
        groups.setdefault(s.group_key(), []).append(s)
    return groups


def measure_plan(sources: list[LinearSource], formats: list[LinearFormat], host: HostInfo,
                 cache_key: str = "", samples: int = SAMPLES, batch_invariant: bool = False) -> KernelPlan:
    """batch_invariant: one batch-invariant format per group, chosen by rule and untimed (module docstring)."""
    start = time.perf_counter()
    if batch_invariant:                  # the block kernels first, the float32 last resorts after them
        formats = sorted((f for f in formats if f.batch_invariant), key=lambda f: f.name in INVARIANT_FALLBACKS)
    todo = group_sources(sources)
    groups = {}
    for i, (key, members) in enumerate(todo.items(), 1):   # progress: only a first start measures (it is cached)
        if not batch_invariant:
            log.info("kernel plan: timing %d formats on %s x%d (%d of %d weight shapes); later starts read it "
                     "from the cache", len(formats), key, len(members), i, len(todo))
        groups[key] = measure_group(key, members, formats, host, samples, first_live=batch_invariant)
    last = {k: bucket_index(max((s.max_rows or BUCKETS[-1]) for s in members))
            for k, members in group_sources(sources).items()}
    noisy = [f"{k}:{n}:{BUCKETS[b]}" for k, g in groups.items() for n, b in implausible_cells(g, last[k])]
    return KernelPlan(asdict(host) | {"flags": None}, cache_key or registry_version(formats), groups,
                      round(time.perf_counter() - start, 2), noisy=noisy, batch_invariant=batch_invariant)
