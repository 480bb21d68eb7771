"""RemoteModels: the ModelRegistry interface the app uses (resolve, acquire, listing, load, unload, stats),
served by ModelsReplicas that each run a registry over the same models (`--models-dir DIR --replicas N`).

    acquire(M)   M's tokenizer (read here once: the ingress templates and encodes); if no replica has M
                 loaded or loading, one load(M) call (concurrent first requests share it) that the router
                 sends to the roomiest replica; then a lease whose engine streams to the replicas with
                 route {"model": M, ...}: the router prefers a replica holding M (model_router.py)
    listing()    the replicas' reports merged: loaded if loaded on any, with which replicas
    load(M)      nothing if a replica holds M, else the same load call as acquire
    unload(M)    every replica holding M unloads it (409 model_busy while a request for M is in flight)

The replicas decide loads, LRU, idle expiry and memory on their own; the ingress only reads their reports,
which come every stats period: load and unload wait (a few periods at most) until the reports agree.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haltwise.cluster import directory
from haltwise.cluster.wire import decode_error
from haltwise.errors import EngineFailure, Overloaded
from haltwise.registry.entry import ModelEntry, named_entry
from haltwise.registry.lease import Lease, ModelBusy

LOAD_WAIT_S = 120.0       # a load call without a deadline (POST /models/load, --model preloads)
REPORTS_WAIT_S = 5.0      # how long load/unload wait for the replicas' reports to show the change
_ROW_KEYS = ("kv_capacity", "resident_bytes", "in_flight", "keep_alive")


class ModelOnReplicas:
    """The AsyncEngine interface of one model on the replicas: what a request's lease hands the routes."""

    def __init__(self, remote: Any, entry: ModelEntry, tokenizer: Any, keep_alive: float | None = None,
                 deadline: float | None = None):
        self.remote, self.entry, self.tokenizer = remote, entry, tokenizer
        self.keep_alive, self.deadline = keep_alive, deadline

    @property
    def max_model_len(self) -> int | None:
        return self.entry.extra.get("max_model_len")

    @property
    def ready(self) -> bool:
        return self.remote.ready

    def stats(self) -> Any:
        return self.remote.stats()

    def bound(self, keep_alive: float | None, deadline: float) -> "ModelOnReplicas":
        return ModelOnReplicas(self.remote, self.entry, self.tokenizer, keep_alive, deadline)

    def generate(self, request_id: str, prompt_token_ids: list[int], params: Any, **_: Any) -> Any:
        wait_s = max(1.0, (self.deadline or time.monotonic() + LOAD_WAIT_S) - time.monotonic())
        route = {"model": self.entry.name, "keep_alive": self.keep_alive, "wait_s": wait_s}
        return self.remote.generate(request_id, prompt_token_ids, params, route=route)

    def abort(self, request_id: str) -> None:
        self.remote.abort(request_id)

    def replica_of(self, request_ids: list[str]) -> str | None:
        return self.remote.replica_of(request_ids)


@dataclass(eq=False)
class ClusterLease(Lease):
    """A request's hold at the ingress: counts it in flight for M (no unload of M while it runs)."""

    view: Any = None

    @property
    def engine(self) -> Any:
        return self.view


def merged_listing(names: list[str], replicas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GET /v1/models over the replicas' reports: loaded if loaded on any; capacity, memory and in-flight
    summed over the replicas that have it loaded; `replicas` lists each holder's own row."""
    rows = []
    for name in names:
        held = [(r["id"], r["models"][name]) for r in replicas if name in (r.get("models") or {})]
        loaded = [(rid, m) for rid, m in held if m["status"]["value"] == "loaded"]
        row: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "haltwise", "status": {
            "value": "loaded" if loaded else "loading" if held else "unloaded"}}
        if loaded:
            first = loaded[0][1]
            caps = [m["kv_capacity"] for _, m in loaded if m.get("kv_capacity")]
            row["max_model_len"] = first.get("max_model_len")
            row["kv_capacity"] = {k: sum(c[k] for c in caps) for k in caps[0]} if caps else None
            row["resident_bytes"] = sum(m.get("resident_bytes") or 0 for _, m in loaded)
            row["in_flight"] = sum(m.get("in_flight") or 0 for _, m in loaded)
            row["keep_alive"] = first.get("keep_alive")
        if held:
            row["replicas"] = [{"id": rid, "status": m["status"]["value"], **{k: m.get(k) for k in _ROW_KEYS}}
                               for rid, m in held]
        rows.append(row)
    return rows


class RemoteModels:
    def __init__(self, remote: Any, handle: Any, table: list[tuple[str, Path]], preload: list[str],
                 chat_template: str | None = None):
        """remote: the RemoteEngine of the ModelsReplica deployment; handle: its DeploymentHandle."""
        from haltwise.cluster.metrics import ClusterModelMetrics

        self.remote, self._handle = remote, handle
        self.entries = {name: ModelEntry(name, path) for name, path in table}
        self.default = table[0][0]
        self.preload, self.chat_template = preload, chat_template
        self.several = True
        self.metrics = ClusterModelMetrics(remote.replicas)
        self._tokenizers: dict[str, asyncio.Future] = {}
        self._loading: dict[str, asyncio.Future] = {}

    # ---- the registry's interface ------------------------------------------------------------------------------
    def resolve(self, model: str | None) -> ModelEntry:
        return named_entry(self.entries, self.default, model)

    async def start(self) -> None:
        await self.remote.start()
        for name in self.preload:
            await self.load(name)

    async def shutdown(self, grace: float) -> None:
        await self.remote.shutdown(grace)

    @property
    def ready(self) -> bool:
        return self.remote.ready

    def stats(self) -> Any:
        return self.remote.stats()

    def listing(self) -> list[dict[str, Any]]:
        return merged_listing(list(self.entries), self.remote.replicas())

    def loaded(self) -> list[ModelEntry]:
        names = {r["id"] for r in self.listing() if r["status"]["value"] == "loaded"}
        return [e for e in self.entries.values() if e.name in names and e.engine is not None]

    async def acquire(self, model: str | None, keep_alive: float | None = None,
                      deadline: float | None = None) -> ClusterLease:
        entry = self.resolve(model)
        deadline = deadline or time.monotonic() + LOAD_WAIT_S
        await self._ingress_side(entry)
        start, waited = time.monotonic(), 0.0
        if not self._holders(entry.name):
            await self._load_once(entry, deadline)
            waited = time.monotonic() - start
        if entry.extra.get("max_model_len") is None:     # loaded before this ingress asked: the report says
            entry.extra["max_model_len"] = next(r.get("max_model_len") for r in self.listing() if r["id"] == entry.name)
        entry.in_flight += 1
        return ClusterLease(self, entry, waited, view=entry.engine.bound(keep_alive, deadline))

    def _release(self, entry: ModelEntry) -> None:
        entry.in_flight -= 1

    async def load(self, name: str, deadline: float | None = None) -> ModelEntry:
        """Load `name` on one replica unless one holds it already; returns once the reports show it loaded."""
        entry = self.resolve(name)
        await self._ingress_side(entry)
        deadline = deadline or time.monotonic() + LOAD_WAIT_S
        if not self._holders(name):
            await self._load_once(entry, deadline)
            await self._reports_show(lambda: self._status(name) == "loaded")
        else:                                # loaded, or loading on a replica: wait for that load
            await self._reports_show(lambda: self._status(name) == "loaded", deadline - time.monotonic())
        return entry

    async def unload(self, name: str, reason: str = "request") -> bool:
        """Unload `name` on every replica that has it (see the module docstring); False if none had it."""
        entry = self.resolve(name)
        if entry.in_flight:
            raise ModelBusy(f"the model '{name}' has {entry.in_flight} request(s) in flight", param="model")
        reported = {r["id"] for r in self.remote.replicas() if name in (r.get("models") or {})}
        holders = set(self._holders(name)) | reported
        answers = await asyncio.gather(*(self._handle.unload.remote(name, rid) for rid in sorted(holders)))
        router = directory.find(self.remote.deployment)
        if router is not None:
            router.forget(name)
        busy = sum(a.get("busy", 0) for a in answers)
        if busy:
            raise ModelBusy(f"the model '{name}' has {busy} request(s) in flight", param="model")
        await self._reports_show(lambda: self._status(name) == "unloaded")
        return bool(holders)

    async def cluster_state(self) -> dict[str, Any]:
        """GET /cluster: each replica's row, with the models it holds and the bytes a new load may take."""
        rows = {r["id"]: r for r in self.remote.replicas()}
        state = await self.remote.cluster_state()
        for row in state["replicas"]:
            stats = rows.get(row["id"], {})
            row["models"] = {n: m["status"]["value"] for n, m in (stats.get("models") or {}).items()}
            row["free_bytes"] = stats.get("free_bytes")
        return state

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _holders(self, name: str) -> list[str]:
        router = directory.find(self.remote.deployment)
        return router.holders(name) if router is not None else []

    def _status(self, name: str) -> str:
        return next(r["status"]["value"] for r in self.listing() if r["id"] == name)

    async def _reports_show(self, check: Any, within: float = REPORTS_WAIT_S) -> None:
        deadline = time.monotonic() + within
        while not check() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    async def _ingress_side(self, entry: ModelEntry) -> None:
        """Read the model's tokenizer here once (entry.engine: the model's view; its ChatEncoder follows)."""
        if entry.engine is not None:
            return
        future = self._tokenizers.get(entry.name)
        if future is None:
            future = self._tokenizers[entry.name] = asyncio.ensure_future(asyncio.to_thread(self._tokenizer, entry))
        try:
            tokenizer = await asyncio.shield(future)
        except Exception as exc:            # an unreadable file: as a failed load (503), tried again next time
            self._tokenizers.pop(entry.name, None)
            raise EngineFailure(f"the model '{entry.name}' failed to load: {type(exc).__name__}: {exc}") from None
        if entry.engine is None:
            entry.engine = ModelOnReplicas(self.remote, entry, tokenizer)

    def _tokenizer(self, entry: ModelEntry) -> Any:
        from haltwise.cluster.session import ingress_tokenizer

        tokenizer = ingress_tokenizer(str(entry.path), tiny=False)
        if self.chat_template is not None and tokenizer.chat_template is None:
            tokenizer.set_chat_template(self.chat_template)
        return tokenizer

    async def _load_once(self, entry: ModelEntry, deadline: float) -> None:
        """One load call per model at a time; every request that needs it waits for it (until its deadline)."""
        future = self._loading.get(entry.name)
        if future is None:
            future = self._loading[entry.name] = asyncio.ensure_future(self._load_call(entry, deadline))
            future.add_done_callback(lambda f, n=entry.name: (self._loading.pop(n, None), f.exception()))
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise Overloaded(f"the model '{entry.name}' is still loading; the request's deadline passed",
                             retry_after=5) from None

    async def _load_call(self, entry: ModelEntry, deadline: float) -> None:
        try:
            row = await self._handle.load.remote(entry.name, max(1.0, deadline - time.monotonic()))
        except Exception as exc:   # the replica died or the call failed
            raise EngineFailure(f"loading the model '{entry.name}' failed on its replica: {type(exc).__name__}")
        if "error" in row:
            raise decode_error(row["error"])
        entry.extra["max_model_len"] = row.get("max_model_len")

