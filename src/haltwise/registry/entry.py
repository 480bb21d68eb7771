"""One servable model: where it comes from, its status, and (loaded) its engine and per-model caches.

Each model keeps its own engine (kernel plan, KV pool, prefix cache, loop detector, stop presets), its
own tokenizer and chat template, and its own ChatEncoder (the plain-text vocabulary copy the chat routes
encode with); nothing of one model is shared with another.
"""
from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haltwise.errors import ModelNotFound
from haltwise.registry.durations import FOREVER
from haltwise.registry.memory import LoadEstimate


class Status(str, enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"      # listed as "unloaded": it cannot serve, and a request for it loads it again


@dataclass(eq=False)
class ModelEntry:
    name: str
    path: Path | None                     # None: an engine handed over ready (single-model, tests, a cluster)
    status: Status = Status.UNLOADED
    engine: Any = None
    in_flight: int = 0                    # leases not yet released (a stream holds one until it ends)
    last_used: float = 0.0                # monotonic; LRU order among idle models
    keep_alive_s: float = FOREVER         # idle time before the reaper unloads it (per request: keep_alive)
    idle_since: float | None = None       # monotonic, once in_flight fell to 0
    unload_when_idle: bool = False        # a request said keep_alive 0
    estimate: LoadEstimate | None = None  # what the load was estimated to take
    load_seconds: float | None = None
    resident_delta: int | None = None     # process resident memory the load added, bytes (measured)
    loaded: asyncio.Future | None = None  # set while loading: the load's outcome, awaited by every waiter
    chat_encoder: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def listed_status(self) -> str:
        return "unloaded" if self.status is Status.UNLOADING else self.status.value

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 or self.status is not Status.LOADED

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def encoder(self) -> Any:
        """The model's ChatEncoder (built once per load: it caches a plain-text copy of the vocabulary)."""
        if self.chat_encoder is None:
            from haltwise.tokenizer.untrusted import ChatEncoder

            self.chat_encoder = ChatEncoder(self.engine.tokenizer)
        return self.chat_encoder

    def kv_capacity(self) -> dict[str, int] | None:
        config = getattr(self.engine, "engine_config", None)
        inner = getattr(self.engine, "engine", None)
        if config is None or inner is None:
            return None
        return {"tokens": inner.budget.num_tokens, "bytes": inner.budget.num_bytes,
                "blocks": inner.budget.num_blocks}

    def drop(self) -> None:
        """Forget the engine and every per-model cache (the memory goes once their last reference does)."""
        self.engine = self.chat_encoder = None
        self.extra.clear()
        self.status, self.loaded, self.in_flight = Status.UNLOADED, None, 0
        self.idle_since, self.unload_when_idle = None, False


def named_entry(entries: dict[str, "ModelEntry"], default: str, model: str | None) -> "ModelEntry":
    """The entry a request's `model` names (None: the default), else ModelNotFound (404) listing what is served."""
    entry = entries.get(default if model is None else model)
    if entry is None:
        offered = ", ".join(sorted(entries)[:20])
        raise ModelNotFound(f"The model '{model}' does not exist; this server serves: {offered}", param="model")
    return entry
