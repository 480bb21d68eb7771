"""HTTP routes: OpenAI generation, models, vLLM-style tokenize/detokenize, health, readiness, metrics."""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from haltwise.errors import HaltwiseError, ModelNotFound, Overloaded
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.server.chat_prompt import chat_prompt
from haltwise.server.chat_tools import prepare_chat
from haltwise.server.limits import check_request_caps
from haltwise.server.metrics import ServerMetrics
from haltwise.server.protocol import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                                      TokenizeRequest)
from haltwise.server.request_log import RequestRecorder
from haltwise.server.responses import Chunker, chat_body, completion_body, raise_if_failed
from haltwise.server.runner import ClientGone, EngineRun

log = logging.getLogger("haltwise.server")
router = APIRouter()
CLIENT_CLOSED = 499  # never seen by anyone: the client has gone


@dataclass(slots=True)
class ServerState:
    """What the routes share; one per app (no module-level state)."""

    engine: Any
    served_model_name: str
    metrics: ServerMetrics
    log_content: bool = False
    draining: bool = False      # set on SIGTERM: new generation requests get 503
    allow_special_tokens_in_content: bool = False  # user/tool text may spell control tokens (old rule)
    tool_call_parser: str | None = None   # --tool-call-parser; None = chosen from the chat template


def _state(request: Request) -> ServerState:
    return request.app.state.server


def _check_model(st: ServerState, model: str | None) -> None:
    if model is not None and model != st.served_model_name:
        raise ModelNotFound(f"The model '{model}' does not exist; this server serves '{st.served_model_name}'",
                            param="model")


def _check_admitting(st: ServerState) -> None:
    if st.draining:
        raise Overloaded("the server is shutting down", retry_after=5)


class _RunStream(StreamingResponse):
    """An SSE response that closes its EngineRun however the response ends (even if never iterated)."""

    def __init__(self, content: AsyncIterator[str], run: EngineRun, headers: dict[str, str]):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
        self.run = run

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.run.close()


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _events(run: EngineRun, chunker: Chunker) -> AsyncIterator[str]:
    """SSE body: chunks, then the usage chunk if asked, then [DONE]; an error becomes an error event."""
    try:
        async for p, out in run.updates():
            for chunk in chunker.chunks(p, out):
                yield _sse(chunk)
        usage = chunker.usage_chunk()
        if usage is not None:
            yield _sse(usage)
    except ClientGone:
        return
    except HaltwiseError as exc:
        yield _sse(exc.to_body())
    except Exception:
        log.exception("stream failed")
        yield _sse({"error": {"message": "Internal server error", "type": "server_error", "param": None,
                              "code": "internal_error"}})
    yield "data: [DONE]\n\n"


async def _generate(request: Request, st: ServerState, rid: str, prompts: list[list[int]],
                    prompt_texts: list[str | None], params: SamplingParams, stream: bool,
                    build: Any, chunker: Chunker) -> Response:
    """Run the engine requests; answer with JSON or SSE. The run is always closed (aborting leftovers)."""
    recorders = [RequestRecorder(st.metrics, rid if len(prompts) == 1 else f"{rid}-{i}", st.log_content, t)
                 for i, t in enumerate(prompt_texts)]
    _check_queue_room(st, prompts, params)
    run = EngineRun(st.engine, request, rid, prompts, params, recorders)
    handed_off = False
    await _check_structure(st, params)
    try:
        await run.start()
        headers = _replica_header(st.engine, run.ids)
        if stream:
            handed_off = True
            return _RunStream(_events(run, chunker), run, headers)
        outs = await run.collect()
        for out in outs:
            raise_if_failed(out)
        return JSONResponse(build(outs), headers=headers)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        if not handed_off:
            await run.close()


def _check_queue_room(st: ServerState, prompts: list[list[int]], params: SamplingParams) -> None:
    """The request is charged its real cost, n x prompts sequences, against the queue before any prompt
    starts: all of them fit, or 503 at once (not after the first prompts were admitted and ran)."""
    config = getattr(st.engine, "engine_config", None)
    if config is None:   # a cluster: each replica's queue decides
        return
    for prompt in prompts:     # a request that can never run is a 400 (context_length_exceeded ...), busy or not
        st.engine.engine.prepare_prompt(prompt, params)
    waiting = st.engine.stats().num_waiting
    sequences = params.n * len(prompts)
    if waiting + sequences > config.max_queue:
        raise Overloaded(f"server busy: {waiting} sequences waiting; this request adds {sequences} "
                         f"(n x prompts), over max_queue {config.max_queue}", retry_after=1.0)


async def _check_structure(st: ServerState, params: SamplingParams) -> None:
    """Compile and validate the request's grammar here, at the edge (cached): a bad one is a 400 with param."""
    compile_structure = getattr(st.engine, "compile_structure", None)
    if params.structured_outputs is not None and compile_structure is not None:
        await run_in_threadpool(compile_structure, params)


def _replica_header(engine: Any, request_ids: list[str]) -> dict[str, str]:
    """x-haltwise-replica: which replica(s) served the request, when the engine is a cluster."""
    replica_of = getattr(engine, "replica_of", None)
    replica = replica_of(request_ids) if replica_of is not None else None
    return {"x-haltwise-replica": replica} if replica else {}


def _echo_texts(prompts: list[str | list[int]], run_outs: list[RequestOutput], tokenizer: Any) -> list[str]:
    """The prompt as echoed: the original string, or the decoded (possibly truncated) prompt ids."""
    texts = []
    for p, out in zip(prompts, run_outs):
        if isinstance(p, str) and not out.num_truncated_prompt_tokens:
            texts.append(p)
        else:
            texts.append(tokenizer.decode(out.prompt_token_ids, skip_special_tokens=False))
    return texts


def _begin(request: Request, body: Any) -> tuple[Any, Any, Any]:
    """Common start of a generation route: (app state, SamplingParams, tokenizer), or an error."""
    st = _state(request)
    _check_model(st, body.model)
    check_request_caps(body, request.app.state.caps)
    _check_admitting(st)
    return st, body.to_sampling_params(), st.engine.tokenizer


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    """OpenAI completions; `prompt` may be a string, strings, token ids or lists of token ids."""
    st, params, tok = _begin(request, body)
    raw = body.prompts()
    # Tokenizing up to max_prompts large prompts is CPU work: off the event loop (a worker thread).
    prompts = await run_in_threadpool(lambda: [tok.encode(p) if isinstance(p, str) else p for p in raw])
    texts = [p if isinstance(p, str) else None for p in raw]
    rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), st.served_model_name

    def build(outs: list[RequestOutput]) -> dict[str, Any]:
        echo = _echo_texts(raw, outs, tok) if body.echo else None
        return completion_body(rid, created, model, outs, body.n, echo, tok, body.prompt_logprobs is not None)

    def echo(p: int, out: RequestOutput) -> str:
        return _echo_texts([raw[p]], [out], tok)[0]

    chunker = Chunker(False, rid, created, model, body.n, tok, body.include_usage, echo if body.echo else None)
    return await _generate(request, st, rid, prompts, texts, params, body.stream, build, chunker)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI chat completions; the messages go through the model's chat template."""
    st, params, tok = _begin(request, body)
    plan, params, messages, template_kwargs = prepare_chat(  # chat_tools.py
        body.tools, body.tool_choice, body.parallel_tool_calls, body.template_messages(), params, tok,
        st.tool_call_parser)
    tools = plan.constraint if plan is not None else None
    text, prompt = await run_in_threadpool(chat_prompt, request, messages,   # template: off the loop
                                           **{**body.template_kwargs(), **template_kwargs})
    rid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), st.served_model_name
    chunker = Chunker(True, rid, created, model, body.n, tok, body.include_usage, tool_calls=tools)
    return await _generate(request, st, rid, [prompt], [text], params, body.stream,
                           lambda outs: chat_body(rid, created, model, outs[0], tok, tools), chunker)


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    st = _state(request)
    return {"object": "list", "data": [{"id": st.served_model_name, "object": "model", "created": 0,
                                        "owned_by": "haltwise", "max_model_len": st.engine.max_model_len}]}


def _check_ids(st: ServerState, ids: list[int], param: str) -> None:
    vocab = st.engine.tokenizer.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ParamError(param, f"token ids must be in [0, {vocab}); got {bad[:5]}")


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    """vLLM-style: {prompt} or {messages} -> {count, max_model_len, tokens}."""
    st = _state(request)
    _check_model(st, body.model)
    check_request_caps(body, request.app.state.caps)
    tok = st.engine.tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise ParamError("prompt", "give exactly one of 'prompt' or 'messages'")
    if body.messages is not None:
        _, ids = await run_in_threadpool(chat_prompt, request, [{"role": m.role, "content": m.text()}
                                                                for m in body.messages],
                                         add_generation_prompt=body.add_generation_prompt)
        if body.add_special_tokens:  # the tokenizer's own BOS/EOS around the chat, as encode() adds them
            ids = tok.encode("", add_special_tokens=True)[:1 if tok.bos_token_id is not None else 0] + ids
    else:
        ids = await run_in_threadpool(tok.encode, body.prompt, add_special_tokens=body.add_special_tokens is not False)
    return {"count": len(ids), "max_model_len": st.engine.max_model_len, "tokens": ids}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    """vLLM-style: {tokens} -> {prompt} (special tokens kept, as vLLM does)."""
    st = _state(request)
    _check_model(st, body.model)
    _check_ids(st, body.tokens, "tokens")
    return {"prompt": st.engine.tokenizer.decode(body.tokens, skip_special_tokens=False)}


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers. Unauthenticated."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """Readiness: model loaded, engine running, breaker not open, not draining. Unauthenticated."""
    st = _state(request)
    engine_ready = bool(getattr(st.engine, "ready", False))
    try:
        breaker = int(st.engine.stats().breaker_state)
    except Exception:
        breaker = 0
    if engine_ready and breaker != 2 and not st.draining:
        return JSONResponse({"status": "ready"})
    reason = "draining" if st.draining else "breaker open" if breaker == 2 else "engine not ready"
    return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)


@router.get("/cluster")
async def cluster(request: Request) -> dict[str, Any]:
    """The replicas behind this server (`--replicas`); 404 for a single engine. Unauthenticated."""
    cluster_state = getattr(_state(request).engine, "cluster_state", None)
    if cluster_state is None:
        raise HTTPException(404, "This server runs a single engine; /cluster needs --replicas or --ray-address")
    return await cluster_state()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text format. Unauthenticated (bind to loopback or firewall it)."""
    return Response(_state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
