"""One long-lived thread that runs every torch call of a served engine: the load, then the step loop.

Why one thread: torch's CPU kernels run on libgomp, and each thread that opens an OpenMP parallel
region gets its own team of workers. Once more threads are managed than there are cores, libgomp
cuts its workers' spin-wait to a few hundred iterations, so every parallel region pays a futex
wake-up. Measured on the 2-core dev machine with the model loaded on the main thread and stepped on
a second thread: int4 matmul 120 us vs 55 us, decode SDPA 80 us vs 19 us, single-stream decode
~26 tok/s instead of ~50. Loading and stepping on the same thread keeps a single team.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class TorchThread:
    """Runs submitted callables one after another on a single daemon thread."""

    def __init__(self, name: str = "haltwise-engine") -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], T]) -> Future:
        """Queue fn; its result (or exception) arrives in the returned future."""
        done: Future = Future()
        self._jobs.put((fn, done))
        return done

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(*args, **kwargs) on the thread and wait for its result (exceptions re-raised here)."""
        return self.submit(lambda: fn(*args, **kwargs)).result()

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def close(self) -> None:
        """Let the thread end once the jobs already queued have run."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done = job
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(fn())
            except BaseException as e:  # delivered to the caller, never kills the thread
                done.set_exception(e)
