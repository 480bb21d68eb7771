"""The generation path the two OpenAI routes share: their SSE body, and charging, starting and answering
one Generation (server/generation.py) with chunks or a JSON body built from the final outputs."""
from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import Response

from haltwise.errors import HaltwiseError
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.server.generation import Generation, raise_if_failed, respond
from haltwise.server.runner import ClientGone
from haltwise.server.state import Served
from haltwise.server.surfaces.openai_bodies import Chunker

log = logging.getLogger("haltwise.server")


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def events(generation: Generation, chunker: Chunker) -> AsyncIterator[str]:
    """SSE body: chunks, then the usage chunk if asked, then [DONE]; an error becomes an error event."""
    try:
        async for p, out in generation.run.updates():
            for chunk in chunker.chunks(p, out):
                yield sse(chunk)
        usage = chunker.usage_chunk()
        if usage is not None:
            yield sse(usage)
    except ClientGone:
        return
    except HaltwiseError as exc:
        yield sse(exc.to_body())
    except Exception:
        log.exception("stream failed")
        yield sse({"error": {"message": "Internal server error", "type": "server_error", "param": None,
                             "code": "internal_error"}})
    yield "data: [DONE]\n\n"


async def generate(request: Request, served: Served, rid: str, prompts: list[list[int]],
                   prompt_texts: list[str | None], params: SamplingParams, stream: bool,
                   build: Callable[[list[RequestOutput]], dict[str, Any]], chunker: Chunker) -> Response:
    """Run the engine requests (n x prompts charged against the queue first); answer with JSON or SSE."""
    generation = Generation(served, request, rid, prompts, prompt_texts, params)
    await generation.reserve()

    async def body() -> dict[str, Any]:
        outs = await generation.run.collect()
        for out in outs:
            raise_if_failed(out)
        return build(outs)

    return await respond(generation, stream, lambda: events(generation, chunker), body)
