"""ModelRegistry: which models this server offers, which are loaded, and when one loads or goes.

    acquire(name, keep_alive, deadline) -> Lease       (release() when the response has ended)
      loaded    -> in_flight += 1
      loading   -> wait for that one load (every concurrent first request waits for the same load)
      unloaded  -> this request starts the load: make room, build the engine on a worker thread, start it

Making room, before a load: while the loaded models number --models-max, or the load's estimate does not
fit what the budget leaves, the least recently used *idle* model is unloaded (reason lru or memory). A
model with a request in flight is never unloaded: the load waits for one to become idle, until the
request's deadline, then 503 + Retry-After. A load that could not fit even with every other model gone is
503 insufficient_memory at once, saying what it needs and what is free.

Idle unload: a reaper unloads a model keep_alive seconds after its last request ended (reason idle); a
request's keep_alive sets that model's keep-alive from then on, 0 unloads it as soon as it is idle
(reason request). All state changes happen on the event loop; only the engine build runs on a thread.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Callable

from haltwise.errors import EngineFailure, HaltwiseError, Overloaded
from haltwise.registry.durations import FOREVER, describe
from haltwise.registry.entry import ModelEntry, Status, named_entry
from haltwise.registry.lease import InsufficientMemory, Lease, in_daemon_thread
from haltwise.registry.memory import (LoadEstimate, MemoryBudget, mib, resident_bytes, return_freed_memory)
from haltwise.registry.metrics import RegistryMetrics
from haltwise.registry.unload import unload_engine

log = logging.getLogger("haltwise.registry")
REAP_EVERY_S = 0.25
Loader = Callable[[Path, LoadEstimate], Any]          # (path, estimate) -> an AsyncEngine, not started (blocking)
Estimator = Callable[[Path, int], LoadEstimate]       # (path, free bytes) -> the estimate


class ModelRegistry:
    def __init__(self, entries: list[ModelEntry], default: str, loader: Loader | None = None,
                 estimator: Estimator | None = None, max_loaded: int = 4, keep_alive_s: float = FOREVER,
                 budget: MemoryBudget | None = None):
        self.entries = {e.name: e for e in entries}
        self.default, self.loader, self.estimator = default, loader, estimator
        self.max_loaded, self.keep_alive_s = max_loaded, keep_alive_s
        self.budget = budget or MemoryBudget()
        self.metrics = RegistryMetrics(self)
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task | None = None
        self.preload: list[str] = []          # loaded by start(), in order (serve's --model names)
        for e in entries:
            e.keep_alive_s = keep_alive_s

    @classmethod
    def single(cls, engine: Any, name: str) -> "ModelRegistry":
        """One engine handed over ready (loaded for as long as the server runs): today's single-model server."""
        entry = ModelEntry(name, None, Status.LOADED, engine)
        return cls([entry], name)

    @property
    def several(self) -> bool:
        return len(self.entries) > 1 or any(e.path is not None for e in self.entries.values())

    def resolve(self, model: str | None) -> ModelEntry:
        """The entry a request's `model` names (None: the default), else ModelNotFound (404)."""
        return named_entry(self.entries, self.default, model)

    def loaded(self) -> list[ModelEntry]:
        return [e for e in self.entries.values() if e.status is Status.LOADED]

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        for e in self.loaded():
            await e.engine.start()
            e.touch()
        for name in self.preload:
            await self.load(name)
        if self.several:
            self._reaper = asyncio.create_task(self._reap())

    async def shutdown(self, grace: float) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for e in list(self.entries.values()):
            if e.engine is not None and e.status in (Status.LOADED, Status.UNLOADING):
                await e.engine.shutdown(grace)

    # ---- requests --------------------------------------------------------------------------------------------
    async def acquire(self, model: str | None, keep_alive: float | None = None,
                      deadline: float | None = None) -> Lease:
        """A lease on the named model, loading it first if needed (see the module docstring)."""
        entry = self.resolve(model)
        start, waited = time.monotonic(), False
        while True:
            if entry.status is Status.LOADED:
                entry.in_flight += 1
                entry.idle_since = None
                entry.touch()
                if keep_alive is not None:
                    entry.keep_alive_s = keep_alive
                    entry.unload_when_idle = keep_alive == 0
                return Lease(self, entry, time.monotonic() - start if waited else 0.0)
            if entry.status is Status.UNLOADED:
                entry.status, entry.loaded = Status.LOADING, asyncio.get_running_loop().create_future()
                asyncio.create_task(self._load(entry, deadline, "request"))
            waiting_for = entry.loaded if entry.status is Status.LOADING else None
            waited = True
            await self._wait(waiting_for, deadline, f"the model '{entry.name}' is still loading")

    def _release(self, entry: ModelEntry) -> None:
        entry.in_flight -= 1
        entry.touch()
        if entry.in_flight == 0:
            entry.idle_since = time.monotonic()
            if entry.unload_when_idle and entry.status is Status.LOADED:
                asyncio.get_running_loop().create_task(self.unload(entry.name, "request"))
        self._notify()

    async def _wait(self, future: asyncio.Future | None, deadline: float | None, what: str) -> None:
        """Wait for `future` (or any change), at most until `deadline`; then 503 + Retry-After."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise Overloaded(f"{what}; the request's deadline passed", retry_after=5)
        waiter = asyncio.shield(future) if future is not None else asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait_for(waiter, left)
        except asyncio.TimeoutError:
            raise Overloaded(f"{what}; the request's deadline passed", retry_after=5) from None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ---- load / unload ---------------------------------------------------------------------------------------
    async def load(self, name: str, deadline: float | None = None) -> ModelEntry:
        """POST /models/load: load it now (no request is held on it); returns once loaded."""
        lease = await self.acquire(name, deadline=deadline)
        lease.release()
        return lease.entry

    async def _load(self, entry: ModelEntry, deadline: float | None, reason: str) -> None:
        assert entry.loaded is not None and entry.path is not None and self.loader is not None
        done = entry.loaded
        try:
            estimate = await self._make_room(entry, deadline)
            before, t0 = resident_bytes(), time.monotonic()
            entry.estimate = estimate        # counted as held by the loads that make room after this one
            log.info("loading %s: estimated %s", entry.name, estimate.describe())
            engine = await in_daemon_thread(self.loader, entry.path, estimate)
            await engine.start()
            entry.engine, entry.estimate, entry.status = engine, estimate, Status.LOADED
            entry.load_seconds, entry.resident_delta = time.monotonic() - t0, resident_bytes() - before
            entry.touch()
            entry.idle_since = time.monotonic()
            self.metrics.loaded(entry)
            log.info("loaded %s in %.2fs: %s; resident memory +%s; keep-alive %s", entry.name, entry.load_seconds,
                     _kv_text(entry), mib(entry.resident_delta), describe(entry.keep_alive_s))
            done.set_result(None)
        except BaseException as exc:
            entry.drop()
            error = exc if isinstance(exc, HaltwiseError) else EngineFailure(
                f"the model '{entry.name}' failed to load: {type(exc).__name__}: {exc}")
            if not isinstance(exc, HaltwiseError):
                log.exception("loading %s failed", entry.name)
            done.set_exception(error)
            done.exception()   # retrieved: no "never retrieved" warning when no request waits any more
        finally:
            self._notify()

    async def _make_room(self, entry: ModelEntry, deadline: float | None) -> LoadEstimate:
        while True:
            others = [e for e in self.entries.values() if e is not entry and e.status is not Status.UNLOADED]
            held = sum(e.estimate.total for e in others if e.estimate is not None)
            free = self.budget.free(held)
            estimate = self.estimator(entry.path, free) if self.estimator else LoadEstimate(0, 0, 0)
            fits = estimate.total <= free
            if len(others) < self.max_loaded and fits:
                return estimate
            idle = sorted((e for e in others if e.status is Status.LOADED and e.in_flight == 0),
                          key=lambda e: e.last_used)
            if idle:
                await self.unload(idle[0].name, "lru" if fits else "memory")
                continue
            if not fits and not self.budget.could_ever_fit(estimate.total, held):
                raise InsufficientMemory(
                    f"the model '{entry.name}' needs {estimate.describe()}; {mib(free)} is free "
                    f"(MemAvailable less the reserve{', within --models-memory' if self.budget.limit else ''})",
                    retry_after=30)
            busy = len(others)
            await self._wait(None, deadline, f"{busy} loaded model(s) are busy and the model '{entry.name}' "
                                             "needs room")

    async def unload(self, name: str, reason: str = "request") -> bool:
        """Unload an idle loaded model; False if it is not loaded or has requests in flight."""
        entry = self.resolve(name)
        if entry.status is not Status.LOADED or entry.in_flight or entry.path is None:
            return False
        entry.status = Status.UNLOADING
        engine, before = entry.engine, resident_bytes()
        await unload_engine(engine)
        entry.drop()
        entry.keep_alive_s = self.keep_alive_s
        del engine
        await asyncio.to_thread(return_freed_memory)
        self.metrics.unloaded(entry, reason)
        log.info("unloaded %s (%s): resident memory %s -> %s", name, reason, mib(before), mib(resident_bytes()))
        self._notify()
        return True

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for e in list(self.entries.values()):
                if (e.status is Status.LOADED and e.in_flight == 0 and e.idle_since is not None
                        and e.path is not None and now - e.idle_since >= e.keep_alive_s):
                    await self.unload(e.name, "idle")

    # ---- reading ---------------------------------------------------------------------------------------------
    def stats(self) -> Any:
        """The engine gauges of /metrics: the loaded models' stats summed (one model: its own)."""
        from haltwise.registry.stats import summed_stats

        return summed_stats([e.engine for e in self.loaded()])

    def free_bytes(self) -> int:
        """What a new load may take now (the budget less what the loaded and loading models hold)."""
        return self.budget.free(sum(e.estimate.total for e in self.entries.values()
                                    if e.status is not Status.UNLOADED and e.estimate is not None))

    def listing(self) -> list[dict[str, Any]]:
        rows = []
        for e in self.entries.values():
            row: dict[str, Any] = {"id": e.name, "object": "model", "created": 0, "owned_by": "haltwise",
                                   "status": {"value": e.listed_status}}
            if e.status is Status.LOADED:
                row["max_model_len"] = e.engine.max_model_len
                row["kv_capacity"] = e.kv_capacity()
                row["resident_bytes"] = e.resident_delta if e.resident_delta is not None else (
                    e.estimate.total if e.estimate else None)
                row["in_flight"] = e.in_flight
                row["keep_alive"] = None if e.keep_alive_s == FOREVER else e.keep_alive_s
            rows.append(row)
        return rows


def _kv_text(entry: ModelEntry) -> str:
    kv = entry.kv_capacity()
    return f"KV pool {kv['tokens']} tokens, {mib(kv['bytes'])}" if kv else "KV pool of the engine"
