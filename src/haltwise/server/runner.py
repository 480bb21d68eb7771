"""Drive the engine requests of one HTTP request (one per prompt) and merge their updates.

Lifecycle:  start() -> updates() ... -> close()      (close() always runs, from a finally)
- start() waits until every prompt has produced its first update, so validation and admission errors
  raised by the engine become HTTP errors before any response byte is sent.
- A client disconnect (watched on the ASGI receive channel) ends the run at once with ClientGone;
  close() then aborts every unfinished engine request, so its KV blocks are freed.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator

from fastapi import Request

from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.server.request_log import RequestRecorder

_END = object()
_GONE = object()


class ClientGone(Exception):
    """The HTTP client disconnected; nothing more can be sent."""


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client has gone (the request body has already been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class EngineRun:
    """The engine requests behind one HTTP request, merged into one stream of (prompt_index, update)."""

    def __init__(self, engine: Any, request: Request, base_id: str, prompts: list[list[int]],
                 params: SamplingParams, recorders: list[RequestRecorder]):
        self.engine = engine
        self.request = request
        self.ids = [base_id if len(prompts) == 1 else f"{base_id}-{i}" for i in range(len(prompts))]
        self.prompts = prompts
        self.params = params
        self.recorders = recorders
        self.finished = [False] * len(prompts)
        self._queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._buffer: list[tuple[int, RequestOutput]] = []
        self._open = len(prompts)
        self.prepared: list[Any] | None = None   # the engine's prepare() per prompt (Generation.reserve)

    async def _pump(self, i: int) -> None:
        prepared = {"prepared": self.prepared[i]} if self.prepared is not None else {}
        gen = self.engine.generate(self.ids[i], self.prompts[i], self.params, **prepared)
        try:
            async for out in gen:
                await self._queue.put((i, out))
            await self._queue.put((i, _END))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # engine errors travel to the consumer
            await self._queue.put((i, exc))
        finally:
            with contextlib.suppress(Exception):
                await gen.aclose()

    async def _watch(self) -> None:
        await wait_for_disconnect(self.request)
        await self._queue.put((-1, _GONE))

    async def _next(self) -> tuple[int, RequestOutput] | None:
        """The next update; None when every prompt has finished. Raises engine errors and ClientGone."""
        while self._open:
            i, item = await self._queue.get()
            if item is _GONE:
                raise ClientGone()
            if item is _END:
                self._open -= 1
                continue
            if isinstance(item, BaseException):
                self.recorders[i].rejected()  # counted as an error response, not as a finished request
                raise item
            self.recorders[i].observe(item)
            if item.finished:
                self.finished[i] = True
                self.recorders[i].finish(item)
            return i, item
        return None

    async def start(self) -> None:
        """Start every engine request; return once each has produced its first update."""
        self._tasks = [asyncio.create_task(self._pump(i)) for i in range(len(self.prompts))]
        self._tasks.append(asyncio.create_task(self._watch()))
        seen: set[int] = set()
        while len(seen) < len(self.prompts):
            item = await self._next()
            if item is None:
                break
            self._buffer.append(item)
            seen.add(item[0])

    async def updates(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Every update in arrival order (the ones start() buffered first)."""
        while self._buffer:
            yield self._buffer.pop(0)
        while (item := await self._next()) is not None:
            yield item

    async def collect(self) -> list[RequestOutput]:
        """Wait for every prompt's final update (non-streaming)."""
        final: dict[int, RequestOutput] = {}
        async for i, out in self.updates():
            final[i] = out
        return [final[i] for i in range(len(self.prompts))]

    async def close(self, detail: str = "client disconnected") -> None:
        """Abort whatever has not finished; idempotent, safe from a finally block."""
        for i, rid in enumerate(self.ids):
            if not self.finished[i]:
                with contextlib.suppress(Exception):
                    self.engine.abort(rid)
                self.recorders[i].cancelled(detail)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
