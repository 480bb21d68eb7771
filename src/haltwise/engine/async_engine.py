"""The asyncio face of the engine: one background engine thread, requests in, RequestOutput updates out.

    event loop (server)                     engine thread
    generate() --prepare (worker pool: stoppers, matchers, grammar; validation errors raise here)
               --submit--> inbox ---------> admit (queue only; admission error -> future)
               <--future-- ...               step() -> updates
    queue.get() <--call_soon_threadsafe---- deliver(update)
    close/cancel --abort------------------> applied before the next step

A watchdog thread ends the requests of a step whose model shows no progress (no layer done) for `watchdog_s`
(reason error) and counts it as a failure for the circuit breaker: a slow step that computes is never ended,
however long it runs. The engine thread never dies of an exception.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import AsyncIterator

from haltwise.config import EngineConfig
from haltwise.engine.breaker import CircuitBreaker
from haltwise.engine.engine import LLMEngine
from haltwise.engine.engine_stats import EngineStats
from haltwise.engine.request_state import RequestState
from haltwise.engine.torch_thread import TorchThread
from haltwise.errors import EngineFailure, HaltwiseError, Overloaded
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.stopping.termination import Reason, Termination

log = logging.getLogger("haltwise.engine")


@dataclass
class _Submission:
    request: RequestState       # prepared off the engine thread (LLMEngine.prepare_request)
    accepted: asyncio.Future


# Per-request preparation (n stoppers with their stop-string automaton, grammar compile and matchers)
# runs on this many worker threads, never on the event loop nor on the engine thread between steps.
PREPARE_WORKERS = 2


class AsyncEngine:
    def __init__(self, engine: LLMEngine, watchdog_s: float = 30.0, breaker: CircuitBreaker | None = None,
                 torch_thread: TorchThread | None = None):
        self.engine = engine
        self._torch_thread = torch_thread or TorchThread()  # runs the step loop (build() also loads on it)
        self.tokenizer = engine.tokenizer
        self.model_config = engine.model_config
        self.engine_config = engine.config
        self.max_model_len = engine.max_model_len
        self.compile_structure = engine.compile_structure   # thread-safe: request handlers validate grammars
        self.watchdog_s = watchdog_s           # a step whose model shows no progress this long is declared hung
        self.breaker = breaker or CircuitBreaker()
        self._inbox: queue.SimpleQueue[_Submission] = queue.SimpleQueue()
        self._prepare = ThreadPoolExecutor(PREPARE_WORKERS, thread_name_prefix="haltwise-prepare")
        self._streams: dict[str, asyncio.Queue] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._accepting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = [self._torch_thread.thread]
        self._step_started: float | None = None     # monotonic start of the step in flight
        self._step_requests: list[str] = []         # request ids in the step in flight
        self._stats = replace(engine.stats())

    @classmethod
    def build(cls, model: str | None = None, engine_config: EngineConfig | None = None,
              rope_scaling: dict | None = None, default_timeout: float | None = None, tiny: bool = False,
              watchdog_s: float = 30.0, breaker_threshold: int = 3, breaker_cooldown_s: float = 5.0,
              prompt_tiers=None) -> "AsyncEngine":
        from haltwise.engine.factory import build_engine

        torch_thread = TorchThread()  # the model is loaded on the thread that will step it (see torch_thread.py)
        engine = torch_thread.call(build_engine, model, engine_config, rope_scaling=rope_scaling,
                                   default_timeout=default_timeout, tiny=tiny, prompt_tiers=prompt_tiers)
        return cls(engine, watchdog_s, CircuitBreaker(breaker_threshold, breaker_cooldown_s), torch_thread)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._accepting = True
        self._torch_thread.submit(self._run)
        watchdog = threading.Thread(target=self._watch, name="haltwise-watchdog", daemon=True)
        watchdog.start()
        self._threads.append(watchdog)

    async def shutdown(self, grace: float = 10.0) -> None:
        """Stop admitting; let in-flight requests finish for up to `grace` seconds, then cancel the rest."""
        self._accepting = False
        deadline = time.monotonic() + grace
        while self._streams and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for request_id in list(self._streams):
            self.engine.abort(request_id, Termination(Reason.CANCELLED, "server shutting down"))
        self._wake.set()
        while self._streams and time.monotonic() < deadline + 2.0:
            await asyncio.sleep(0.05)
        self._stop.set()
        self._wake.set()
        self._torch_thread.close()
        self._prepare.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> bool:
        return self._accepting and self.breaker.allows_requests() and all(t.is_alive() for t in self._threads)

    def describe(self) -> str:
        return self.engine.describe()

    def step_running_for(self) -> float:
        """Seconds the step in flight has run (0.0 between steps); a wedged engine shows it growing."""
        started = self._step_started
        return time.monotonic() - started if started is not None else 0.0

    def stats(self) -> EngineStats:
        return replace(self._stats, breaker_state=int(self.breaker.state))

    # ---- requests ----------------------------------------------------------------------------------------------
    async def prepare(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> RequestState:
        """Validate a request and build its state off the engine thread (LLMEngine.prepare_request): raises
        InvalidRequest / ContextLengthExceeded. The server's routes prepare first, to charge the queue for
        every prompt of a request before any starts, and hand the result to generate()."""
        return await asyncio.get_running_loop().run_in_executor(
            self._prepare, self.engine.prepare_request, request_id, list(prompt_token_ids), params)

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       prepared: RequestState | None = None) -> AsyncIterator[RequestOutput]:
        """Raises a HaltwiseError before the first update if the request is refused. Closing the
        generator early (client gone) aborts the request: reason cancelled, blocks freed. prepared: this
        request's prepare() result (it is then not validated again)."""
        if not self._accepting:
            raise Overloaded("The server is shutting down.", retry_after=5.0)
        if not self.breaker.allows_requests():
            raise Overloaded("The engine is failing repeatedly (circuit breaker open); retry later.",
                             retry_after=self.breaker.retry_after())
        if request_id in self._streams:
            raise HaltwiseError(f"Duplicate request id {request_id!r}.", param="request_id")
        updates: asyncio.Queue = asyncio.Queue()
        accepted = asyncio.get_running_loop().create_future()
        self._streams[request_id] = updates
        finished = False
        try:
            if prepared is None:
                prepared = await self.prepare(request_id, prompt_token_ids, params)
            self._inbox.put(_Submission(prepared, accepted))
            self._wake.set()
            await accepted
            while True:
                item = await updates.get()
                if isinstance(item, Exception):
                    finished = True
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self.engine.abort(request_id)
                self._wake.set()

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)
        self._wake.set()

    # ---- engine thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._admit()
                if not self.engine.has_unfinished():
                    self.engine.take_committed_blocks()      # an idle pool grows too (pool_growth.py)
                    self._stats = self.engine.stats()
                    self._wake.wait(0.1)
                    self._wake.clear()
                    continue
                self._step_requests = list(self.engine.requests)
                self._step_started = time.monotonic()
                updates = self.engine.step()
                self._step_started = None
                if self.engine.last_step_error is not None:
                    self.breaker.record_failure()
                elif self.engine.last_step_ran_model:
                    self.breaker.record_success()
                self._stats = self.engine.stats()
                for update in updates:
                    self._deliver(update.request_id, update)
            except Exception:  # the loop must survive anything; the requests of a broken step end with error
                self._step_started = None
                log.exception("engine loop error")
                self.breaker.record_failure()
                for request_id in self._step_requests:
                    self._fail(request_id, "engine loop error")

    def _admit(self) -> None:
        while True:
            try:
                sub = self._inbox.get_nowait()
            except queue.Empty:
                return
            try:
                self.engine.admit(sub.request)
                self._resolve(sub.accepted, None)
            except HaltwiseError as e:
                self._resolve(sub.accepted, e)
            except Exception as e:  # unexpected: report as an engine failure, never a hang
                log.exception("add_request failed")
                self._resolve(sub.accepted, EngineFailure(f"could not start the request: {e}"))

    def _resolve(self, future: asyncio.Future, error: Exception | None) -> None:
        def set_result() -> None:
            if not future.done():
                future.set_exception(error) if error else future.set_result(None)
        self._loop.call_soon_threadsafe(set_result)

    def _deliver(self, request_id: str, item: RequestOutput | Exception) -> None:
        def put() -> None:
            stream = self._streams.get(request_id)
            if stream is not None:
                stream.put_nowait(item)
        self._loop.call_soon_threadsafe(put)

    def _fail(self, request_id: str, detail: str) -> None:
        self.engine.abort(request_id, Termination(Reason.ERROR, detail))
        self._deliver(request_id, EngineFailure(f"The engine failed on this request: {detail}."))

    # ---- watchdog ----------------------------------------------------------------------------------------------
    def _watch(self) -> None:
        """Ends the step in flight once it has shown no progress for watchdog_s (docs/engine-steps.md).

        Progress is the model's counter (ModelRunner.progress: every decoder layer, and every attention in
        the native stack, moves it), so a long step that computes never fires, however long it runs; a
        stuck one (a kernel that does not return, a deadlock, a stall before the model) stops the counter.
        """
        fired_for: float | None = None
        seen_step: float | None = None
        seen_beat, quiet_since = 0, 0.0
        while not self._stop.wait(min(0.25, self.watchdog_s / 4)):
            started = self._step_started
            if started is None or started == fired_for:
                continue
            beat, now = self._progress(), time.monotonic()
            if started != seen_step:
                seen_step, seen_beat, quiet_since = started, beat, started
            elif beat != seen_beat:
                seen_beat, quiet_since = beat, now
            if now - quiet_since < self.watchdog_s or self._step_started != started:
                continue
            fired_for = started
            log.error("watchdog: engine step made no progress for %.1fs; ending its requests", self.watchdog_s)
            self.breaker.record_failure()
            for request_id in list(self._step_requests):
                self._fail(request_id, f"engine step made no progress for {self.watchdog_s:g}s (watchdog)")

    def _progress(self) -> int:
        try:
            return self.engine.runner.progress()
        except Exception:   # a model without a counter, or one being swapped: no evidence of progress
            return 0
