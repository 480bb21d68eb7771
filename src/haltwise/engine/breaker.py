"""Circuit breaker around the engine step: closed -> open after K failures -> half-open -> closed."""
from __future__ import annotations

import logging
import threading
import time
from enum import IntEnum

log = logging.getLogger("haltwise.engine")


class BreakerState(IntEnum):
    CLOSED = 0      # normal
    HALF_OPEN = 1   # cool-down passed: let traffic in; the next step decides
    OPEN = 2        # fail fast: new requests get 503 + Retry-After


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 3, cooldown_s: float = 5.0, clock=time.monotonic):
        self.failure_threshold = failure_threshold  # consecutive failed steps that open the breaker
        self.cooldown_s = cooldown_s                # how long it stays open before half-opening
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._lock = threading.Lock()

    @property
    def state(self) -> BreakerState:
        with self._lock:
            if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.cooldown_s:
                self._move(BreakerState.HALF_OPEN)
            return self._state

    def retry_after(self) -> float:
        """Seconds until the breaker half-opens (at least 1, as Retry-After is whole seconds)."""
        with self._lock:
            return max(1.0, self.cooldown_s - (self._clock() - self._opened_at))

    def allows_requests(self) -> bool:
        return self.state is not BreakerState.OPEN

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            if self._state is not BreakerState.CLOSED:
                self._move(BreakerState.CLOSED)

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.failure_threshold:
                self._opened_at = self._clock()
                if self._state is not BreakerState.OPEN:
                    self._move(BreakerState.OPEN)

    def _move(self, new: BreakerState) -> None:
        log.warning("circuit breaker %s -> %s (consecutive failures %d)", self._state.name, new.name, self._failures)
        self._state = new
