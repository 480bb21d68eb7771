"""HTTP routes that are no protocol surface: models, vLLM-style tokenize/detokenize, health, readiness,
cluster, metrics. The generation routes are surfaces (server/surfaces/), over server/state.py and
server/generation.py."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from haltwise.sampling_params import ParamError
from haltwise.server.chat_prompt import chat_prompt
from haltwise.server.limits import check_request_caps
from haltwise.server.state import ServerState, check_model, state_of
from haltwise.server.surfaces.openai_protocol import DetokenizeRequest, TokenizeRequest

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    st = state_of(request)
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
    st = state_of(request)
    check_model(st, body.model)
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
    st = state_of(request)
    check_model(st, body.model)
    _check_ids(st, body.tokens, "tokens")
    return {"prompt": st.engine.tokenizer.decode(body.tokens, skip_special_tokens=False)}


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers. Unauthenticated."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """Readiness: model loaded, engine running, breaker not open, not draining. Unauthenticated."""
    st = state_of(request)
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
    cluster_state = getattr(state_of(request).engine, "cluster_state", None)
    if cluster_state is None:
        raise HTTPException(404, "This server runs a single engine; /cluster needs --replicas or --ray-address")
    return await cluster_state()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text format. Unauthenticated (bind to loopback or firewall it)."""
    return Response(state_of(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
