"""A request's hold on a loaded model (Lease), the 503 of a model that cannot fit, the 409 of an unload that
would cut requests, and the loads' thread."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Callable

from haltwise.errors import HaltwiseError
from haltwise.registry.entry import ModelEntry


class InsufficientMemory(HaltwiseError):
    """The model cannot fit, even with every idle model unloaded (503)."""

    status = 503
    type = "server_error"
    code = "insufficient_memory"


class ModelBusy(HaltwiseError):
    """An unload asked for while requests are in flight on the model (409)."""

    status = 409
    code = "model_busy"


@dataclass(eq=False)
class Lease:
    """One request's hold on a loaded model: the model is not unloaded before release()."""

    registry: Any                     # the ModelRegistry that leased it (registry.py)
    entry: ModelEntry
    waited_s: float = 0.0           # time this request waited for the load (part of its time to first token)
    released: bool = False

    @property
    def engine(self) -> Any:
        return self.entry.engine

    @property
    def name(self) -> str:
        return self.entry.name

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.registry._release(self.entry)


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) on a daemon thread of its own: a load in progress never holds up the process's exit
    (the event loop's executor would wait for it at shutdown)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # delivered to the awaiting coroutine
            loop.call_soon_threadsafe(lambda e=exc: done.done() or done.set_exception(e))
        else:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

    threading.Thread(target=run, name="haltwise-model-load", daemon=True).start()
    return await done
