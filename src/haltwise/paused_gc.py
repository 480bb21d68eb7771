"""The cyclic garbage collector paused while a start allocates objects that nearly all stay alive.

Importing torch and FastAPI and building an engine make millions of objects (modules, a tokenizer's
pieces and merges, the model's parameters) and free almost none, yet every 700 net allocations the
collector runs, and its older generations' passes walk everything made so far. Paused through the
imports and the build, the main thread of Gemma 3's second start spent ~0.6 s less CPU (3.5-4.3 vs
4.0-4.7 s, 4 runs each alternating, Zen 4). Pauses nest: only the outermost one turns the collector back
on, and only if it was on.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc(freeze: bool = False) -> Iterator[None]:
    """freeze: on a normal exit, move every object made so far out of the collector's reach for good
    (gc.freeze()). Without it the first collection after the pause walks all of them at once (0.1 s after
    the CLI's imports), and every full one after that again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()
