"""The seam every linear kernel plugs into: a LinearFormat prepares a weight once and multiplies by it.

A format is one way to compute y = x @ W.T on this CPU (plain float32, bf16, oneDNN-prepacked bf16,
int8/int4 weight-only, native GGUF-block kernels, ...). The plan (plan.py) measures every registered
format on the model's real shapes and keeps, per row bucket, the fastest whose numbers agree with the
float32 reference within the format's own `tolerance`. Contract:

  * `unavailable(host)` names why the format cannot run here (missing ISA, missing op), else None.
    Only cheap checks belong here; `prepare` may still raise Unsupported (or anything: the plan
    catches every exception and records it as the reason the format is excluded).
  * `prepare(source)` -> an opaque object holding the weight in the format. It must not keep
    `source.weight` alive unless it multiplies by it (memory).
  * `run(prepared, x)`: x (rows, in) float32, contiguous, rows >= 1 -> (rows, out) float32 = x @ W.T.
    The bias is NOT the format's business: PlannedLinear adds `source.bias` after `run`.
  * `version`: bump it when the format's numbers or speed change, so cached plans are re-measured.
  * `batch_invariant`: row r of `run(prepared, x)` depends only on x[r] and the weight -- the same bits
    whatever the other rows, their number, or the thread count. Only such formats serve the default
    (deterministic) path; the verification (kernels/verify.py) checks the claim on every linear.
  * `error_bound(x, weight, abs_dot)`: the largest |y - F.linear(x, W)| the format may produce on each
    output (rows, out), justified by how it rounds; abs_dot = |x| @ |W|.T. The verification holds every
    (linear, row bucket) cell to it on activations from a real forward pass.

Native formats register themselves on import of `haltwise.kernels.native` (see `all_formats`).
"""
from __future__ import annotations

import hashlib
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from haltwise.kernels.host import HostInfo

if TYPE_CHECKING:
    from haltwise.kernels.record_cache import RecordCache


GROUP_SAMPLE_ROWS = 8    # rows the group key checks for a 4-bit grid (cheap; prepare checks all)


class Unsupported(Exception):
    """This format cannot hold this weight (e.g. not on a 4-bit grid); the message says why."""


@dataclass(frozen=True, eq=False)
class GGUFShard:
    """One checkpoint tensor's raw GGUF blocks, rows in Hugging Face order (q/k unpermuted)."""

    qtype: Any                   # gguf.GGMLQuantizationType
    data: np.ndarray             # uint8 (rows, bytes_per_row)
    rows: int


class LinearSource:
    """One linear weight as the checkpoint gives it.

    name: fused HF-style name ("model.layers.0.self_attn.qkv_proj"); weight: (out, in) float32, the
    dequantized checkpoint values; gguf: the raw blocks, one shard per fused part in row order, or None.

    Weights kept only as they run (issue 25): a model loaded from a mapped GGUF has no float32 linears
    (their parameters are meta tensors). Such a source is given `load_weight`, and `weight` dequantizes on
    first use and holds the result until `release()`: only the formats that multiply in float32 and the
    plan's measuring ever ask, one linear at a time. Verification asks `weight_rows` (load_rows: a few
    output rows dequantized).
    """

    def __init__(self, name: str, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 gguf: list[GGUFShard] | None = None, max_rows: int | None = None,
                 load_weight: Callable[[], torch.Tensor] | None = None,
                 load_rows: Callable[[torch.Tensor], torch.Tensor] | None = None):
        if weight.is_meta and load_weight is None:
            raise ValueError(f"{name}: a meta weight needs load_weight")
        self.name, self.bias, self.gguf, self.max_rows = name, bias, gguf, max_rows
        self.records: RecordCache | None = None     # the model's regrouped records on disk (set by the plan)
        self._stored, self._load, self._loaded = weight, load_weight, None
        self._load_rows = load_rows
        self._group: str | None = None

    @property
    def weight(self) -> torch.Tensor:
        if not self._stored.is_meta:
            return self._stored
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def weight_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The float32 weights of some output rows (ascending ids): only those are dequantized when the source
        can (load_rows), else rows of `weight`. Nothing is kept."""
        if self._stored.is_meta and self._loaded is None and self._load_rows is not None:
            return self._load_rows(rows)
        return self.weight[rows]

    def release(self) -> None:
        """Drop a weight dequantized on demand (a format that multiplies by it keeps its own reference)."""
        self._loaded = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self._stored.shape)  # type: ignore[return-value]

    def group_key(self) -> str:
        """Sources with equal keys are measured once and share a plan: their shape and what their values
        are (the GGUF quantization types when raw blocks exist, else whether they lie on a 4-bit grid)."""
        if self._group is None:
            from haltwise.kernels.quant import int4_grid

            if self.gguf:
                kind = "+".join(getattr(s.qtype, "name", str(s.qtype)) for s in self.gguf)
            else:
                # the first rows decide (cheap); int4's prepare checks the whole weight and may still refuse
                kind = "grid4" if int4_grid(self.weight[:GROUP_SAMPLE_ROWS]) is not None else "dense"
            rows = f":rows<={self.max_rows}" if self.max_rows else ""
            self._group = f"{self.shape[0]}x{self.shape[1]}:{kind}{rows}"
        return self._group


# One float32 rounding (unit roundoff 2^-24); a float32 dot product of length K is within
# K * U32 * sum|w x| of the exact sum (Higham's gamma_K, to first order), in any summation order.
U32 = 2.0 ** -24
# bfloat16 keeps 8 significant bits: rounding a value moves it by at most 2^-9 of itself.
U_BF16 = 2.0 ** -9


def float32_sum_bound(weight: torch.Tensor, abs_dot: torch.Tensor) -> torch.Tensor:
    """Two float32 dot products of length K (ours and the reference's) each within gamma_K of the exact sum."""
    return 2 * weight.shape[1] * U32 * abs_dot


class LinearFormat(ABC):
    name: str = ""
    tolerance: float = 0.0       # max |y - y_ref| / max |y_ref| on Gaussian inputs (the measuring check)
    exact: bool = False          # computes in float32 on the checkpoint's own values
    batch_invariant: bool = False
    version: int = 1

    def error_bound(self, x: torch.Tensor, weight: torch.Tensor, abs_dot: torch.Tensor) -> torch.Tensor:
        """(rows, out) bound on |y - F.linear(x, weight)|. Default: the relative tolerance of the largest output."""
        ref_max = (x @ weight.T).abs().max()
        return torch.full_like(abs_dot, float(self.tolerance * ref_max))

    def unavailable(self, host: HostInfo) -> str | None:
        return None

    @abstractmethod
    def prepare(self, source: LinearSource) -> Any: ...

    @abstractmethod
    def run(self, prepared: Any, x: torch.Tensor) -> torch.Tensor: ...

    def __repr__(self) -> str:
        return f"<LinearFormat {self.name}>"


_REGISTRY: dict[str, LinearFormat] = {}
_PLUGINS = ("haltwise.kernels.torch_formats", "haltwise.kernels.native")
_loaded = False


def register(fmt: LinearFormat) -> LinearFormat:
    """Add (or replace, by name) a format. Returns it, so it can decorate an instance assignment."""
    if not fmt.name:
        raise ValueError("a LinearFormat needs a name")
    _REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_plugins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in _PLUGINS:
            importlib.import_module(module)


def all_formats() -> list[LinearFormat]:
    """Every registered format, in registration order (built-in torch formats first)."""
    _load_plugins()
    return list(_REGISTRY.values())


def get(name: str) -> LinearFormat:
    _load_plugins()
    return _REGISTRY[name]


def registry_version(formats: list[LinearFormat] | None = None) -> str:
    """A digest of the formats' names and versions: part of the plan-cache key."""
    formats = all_formats() if formats is None else formats
    text = ",".join(f"{f.name}@{f.version}" for f in formats)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
