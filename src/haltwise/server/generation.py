"""The engine side of one generation route, for every surface, and the route mechanics written once.

    Generation(served, request, rid, prompts, texts, params)  recorders, EngineRun (not started)
    respond(generation, stream, events, body):
        prepare() -- structure compiled (400 with param); nothing started yet, nothing to close or record
        start()  -- engine requests started, first update seen
        stream   -- handed off to a GenerationStream, which closes the generation however it ends
        else     -- JSON from body() with the replica header
        client gone before an answer -> 499;  close() always runs, from a finally, unless handed off

A surface supplies only its shapes: events() (its SSE text) and body() (its JSON object).
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from haltwise.errors import EngineFailure, Overloaded
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.server.request_log import RequestRecorder
from haltwise.server.runner import ClientGone, EngineRun
from haltwise.server.state import Served
from haltwise.stopping.termination import Reason

CLIENT_CLOSED = 499  # never seen by anyone: the client has gone


def raise_if_failed(out: RequestOutput) -> None:
    """A request the engine ended with `error` or `cancelled` has no answer to give."""
    for o in out.outputs:
        t = o.termination
        if t is not None and t.reason is Reason.ERROR:
            raise EngineFailure(f"generation failed: {t.detail or 'engine error'}")
        if t is not None and t.reason is Reason.CANCELLED:
            raise Overloaded(f"request cancelled by the server: {t.detail or 'shutting down'}",
                             code="cancelled", retry_after=1)


def replica_header(engine: Any, request_ids: list[str]) -> dict[str, str]:
    """x-haltwise-replica: which replica(s) served the request, when the engine is a cluster."""
    replica_of = getattr(engine, "replica_of", None)
    replica = replica_of(request_ids) if replica_of is not None else None
    return {"x-haltwise-replica": replica} if replica else {}


class Generation:
    """The engine requests behind one HTTP request (one per prompt), each recorded in the metrics and
    the JSON log line (request_log.py) the same way whatever the surface."""

    def __init__(self, served: Served, request: Request, rid: str, prompts: list[list[int]],
                 prompt_texts: list[str | None], params: SamplingParams):
        self.engine, self.prompts, self.params = served.engine, prompts, params
        st = served.st
        recorders = [RequestRecorder(st.metrics, rid if len(prompts) == 1 else f"{rid}-{i}", st.log_content, t,
                                     model=served.name, load_wait_s=served.lease.waited_s)
                     for i, t in enumerate(prompt_texts)]
        self.run = EngineRun(served.engine, request, rid, prompts, params, recorders)
        self.headers: dict[str, str] = {}

    async def reserve(self) -> None:
        """Validate every prompt (the engine prepares each request once, here), then charge the request its
        real cost, n x prompts sequences, against the queue before any prompt starts: a request that can
        never run is a 400 (context_length_exceeded ...), busy or not; one that fits nowhere now is a 503 at
        once, not after its first prompts were admitted and ran."""
        engine = self.engine
        config = getattr(engine, "engine_config", None)
        if config is None:   # a cluster: each replica validates and its queue decides
            return
        self.run.prepared = [await engine.prepare(rid, prompt, self.params)
                             for rid, prompt in zip(self.run.ids, self.prompts)]
        waiting = engine.stats().num_waiting
        sequences = self.params.n * len(self.prompts)
        if waiting + sequences > config.max_queue:
            raise Overloaded(f"server busy: {waiting} sequences waiting; this request adds {sequences} "
                             f"(n x prompts), over max_queue {config.max_queue}", retry_after=1.0)

    async def prepare(self) -> None:
        """Compile and validate the request's grammar at the edge (cached): a bad one is a 400 with param."""
        compile_structure = getattr(self.engine, "compile_structure", None)
        if self.params.structured_outputs is not None and compile_structure is not None:
            await run_in_threadpool(compile_structure, self.params)

    async def start(self) -> None:
        """Start the engine requests, wait for their first updates."""
        await self.run.start()
        self.headers = replica_header(self.engine, self.run.ids)

    async def close(self) -> None:
        await self.run.close()


class Closable(Protocol):
    headers: dict[str, str]

    async def prepare(self) -> None: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class GenerationStream(StreamingResponse):
    """An SSE response that closes its generation however the response ends (even if never iterated)."""

    def __init__(self, content: AsyncIterator[str], call: Closable):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **call.headers})
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.call.close()


async def respond(call: Closable, stream: bool, events: Callable[[], AsyncIterator[str]],
                  body: Callable[[], Awaitable[Any]]) -> Response:
    """Start `call`, then answer with its stream or its JSON body (see the module docstring)."""
    await call.prepare()
    handed_off = False
    try:
        await call.start()
        if stream:
            handed_off = True
            return GenerationStream(events(), call)
        return JSONResponse(await body(), headers=call.headers)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        if not handed_off:
            await call.close()
