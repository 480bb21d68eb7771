"""HTTP routes that are no protocol surface: models (list, load, unload), vLLM-style tokenize/detokenize,
health, readiness, cluster, metrics. The generation routes are surfaces (server/surfaces/), over
server/state.py and server/generation.py."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from haltwise.registry.entry import Status
from haltwise.registry.lease import ModelBusy
from haltwise.sampling_params import ParamError
from haltwise.server.chat_prompt import chat_prompt
from haltwise.server.request_fields import Strict
from haltwise.server.state import LOAD_WAIT_S, Served, begin, state_of
from haltwise.server.surfaces.openai_protocol import DetokenizeRequest, TokenizeRequest

router = APIRouter()


class ModelAction(Strict):
    """POST /models/load and /models/unload (llama-server's paths)."""

    model: str


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    """Every servable model with status {"value": loaded | loading | unloaded}; a loaded one with its KV
    capacity and the resident memory its load added."""
    return {"object": "list", "data": state_of(request).models.listing()}


@router.post("/models/load")
async def load_model(body: ModelAction, request: Request) -> dict[str, Any]:
    """Load a model now (unloading idle ones if it needs room); answers once it is loaded."""
    import time

    models = state_of(request).models
    entry = await models.load(models.resolve(body.model).name, time.monotonic() + LOAD_WAIT_S)
    return _row(models, entry.name)


@router.post("/models/unload")
async def unload_model(body: ModelAction, request: Request) -> dict[str, Any]:
    """Unload a model now; 409 model_busy while requests are in flight on it."""
    models = state_of(request).models
    entry = models.resolve(body.model)
    if entry.path is None:
        raise ParamError("model", f"the model '{entry.name}' was handed to this server ready and stays loaded")
    if entry.status is Status.LOADED and entry.in_flight:
        raise ModelBusy(f"the model '{entry.name}' has {entry.in_flight} request(s) in flight", param="model")
    await models.unload(entry.name, "request")
    return _row(models, entry.name)


def _row(models: Any, name: str) -> dict[str, Any]:
    return next(r for r in models.listing() if r["id"] == name)


def _check_ids(served: Served, ids: list[int], param: str) -> None:
    vocab = served.tokenizer.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ParamError(param, f"token ids must be in [0, {vocab}); got {bad[:5]}")


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    """vLLM-style: {prompt} or {messages} -> {count, max_model_len, tokens}."""
    served = await begin(request, body, admitting=False)
    tok = served.tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise ParamError("prompt", "give exactly one of 'prompt' or 'messages'")
    if body.messages is not None:
        _, ids = await run_in_threadpool(chat_prompt, served, [{"role": m.role, "content": m.text()}
                                                               for m in body.messages],
                                         add_generation_prompt=body.add_generation_prompt)
        if body.add_special_tokens:  # the tokenizer's own BOS/EOS around the chat, as encode() adds them
            ids = tok.encode("", add_special_tokens=True)[:1 if tok.bos_token_id is not None else 0] + ids
    else:
        ids = await run_in_threadpool(tok.encode, body.prompt, add_special_tokens=body.add_special_tokens is not False)
    return {"count": len(ids), "max_model_len": served.engine.max_model_len, "tokens": ids}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    """vLLM-style: {tokens} -> {prompt} (special tokens kept, as vLLM does)."""
    served = await begin(request, body, admitting=False, caps=False)
    _check_ids(served, body.tokens, "tokens")
    return {"prompt": served.tokenizer.decode(body.tokens, skip_special_tokens=False)}


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers. Unauthenticated."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """Readiness: every loaded engine running, breaker not open, not draining. Unauthenticated. (Several
    models: ready with none loaded too, since a request loads its model.)"""
    st = state_of(request)
    engines = [e.engine for e in st.models.loaded()]
    engine_ready = all(bool(getattr(e, "ready", False)) for e in engines) and (bool(engines) or st.models.several)
    engine_ready = engine_ready and getattr(st.models, "ready", True)    # replicas: any one running
    try:
        breaker = max((int(e.stats().breaker_state) for e in engines), default=0)
    except Exception:
        breaker = 0
    if engine_ready and breaker != 2 and not st.draining:
        return JSONResponse({"status": "ready"})
    reason = "draining" if st.draining else "breaker open" if breaker == 2 else "engine not ready"
    return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)


@router.get("/cluster")
async def cluster(request: Request) -> dict[str, Any]:
    """The replicas behind this server (`--replicas`); 404 for a single engine. Unauthenticated."""
    models = state_of(request).models
    loaded = models.loaded()
    cluster_state = getattr(models, "cluster_state", None) or (   # several models on replicas, or one
        getattr(loaded[0].engine, "cluster_state", None) if len(loaded) == 1 else None)
    if cluster_state is None:
        raise HTTPException(404, "This server runs a single engine; /cluster needs --replicas or --ray-address")
    return await cluster_state()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text format. Unauthenticated (bind to loopback or firewall it)."""
    return Response(state_of(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
