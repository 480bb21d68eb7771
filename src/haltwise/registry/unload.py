"""Stopping one model's engine so that every byte it held can go: its threads end, its maps are dropped."""
from __future__ import annotations

import asyncio
from typing import Any

from haltwise.gguf import metadata as gguf_metadata


async def unload_engine(engine: Any) -> None:
    """Shut the engine down (no request is in flight: the registry checked) and wait for its threads, which
    hold it; forget the GGUF reader the metadata module keeps for the last file it opened (its map)."""
    await engine.shutdown(0.0)
    threads = list(getattr(engine, "_threads", ()))
    await asyncio.to_thread(lambda: [t.join(5.0) for t in threads])
    gguf_metadata.forget_opened()
