"""A test double for checking the benchmark instruments, not a stand-in for haltwise.

`fake_app(fault)` is a minimal OpenAI-shaped completion server with haltwise's /metrics names. With
fault=None it behaves (validates like haltwise, answers min(max_tokens, 6) tokens, counts every
request); each named fault breaks one thing the instruments must notice:

    refuse_all        every valid request: 503 overloaded + Retry-After (counted as rejected)
    accept_invalid    bad parameters (temperature 5, max_tokens 0, unknown fields, ...) answered 200
    truncate_oversize a prompt longer than the window is silently cut and answered 200
    drop_gauge        /metrics has no haltwise_kv_blocks_used
    breaker_open      haltwise_engine_breaker_state reads 2 (open)
    spurious_cancel   finished requests are counted as termination_reason="cancelled"
    uncounted         finished requests are not counted at all
    overlong          answers max_tokens + 3 tokens
    leak_stop         the text ends with the request's first stop string
    malformed         a 200 whose body has no choices
    cut_streams       streams end after 2 tokens with finish_reason "stop" (like an interrupted peer)
"""
from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

WINDOW = 256
ALLOWED = {"model", "prompt", "messages", "max_tokens", "stream", "temperature", "seed", "stop", "stream_options",
           "timeout", "top_p", "n", "ignore_eos", "logit_bias", "repetition_detection"}
WORD = "zq "  # matches none of the stress tool's stop strings


def _error(status: int, message: str, code: str | None = None, **headers: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}},
                        status_code=status, headers=headers)


def _invalid(body: Any) -> str | None:
    """Why haltwise would refuse this body (None: it is valid)."""
    if not isinstance(body, dict):
        return "not an object"
    if set(body) - ALLOWED:
        return "unknown field"
    mt = body.get("max_tokens", 16)
    if not isinstance(mt, int) or mt < 1:
        return "max_tokens"
    if not 0.0 <= body.get("temperature", 1.0) <= 2.0 or not 0.0 < body.get("top_p", 1.0) <= 1.0:
        return "sampling"
    if body.get("n", 1) < 1 or "" in (body.get("stop") or []):
        return "n or stop"
    return None


def fake_app(fault: str | None = None) -> FastAPI:
    app = FastAPI()
    finished: Counter[str] = Counter()
    rejected: Counter[str] = Counter()

    def reject(status: int, message: str, code: str, **headers: str) -> JSONResponse:
        rejected[code] += 1
        return _error(status, message, code, **headers)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": WINDOW}]}

    @app.get("/metrics")
    async def metrics() -> Response:
        gauges = {"haltwise_requests_running": 0, "haltwise_requests_waiting": 0, "haltwise_kv_blocks_used": 0,
                  "haltwise_kv_blocks_total": 64, "haltwise_engine_breaker_state": 2 if fault == "breaker_open" else 0,
                  "haltwise_preemptions_total": 0}
        if fault == "drop_gauge":
            del gauges["haltwise_kv_blocks_used"]
        lines = [f"{k} {v}" for k, v in gauges.items()]
        lines += [f'haltwise_requests_finished_total{{finish_reason="x",termination_reason="{k}"}} {v}'
                  for k, v in finished.items()]
        lines += [f'haltwise_requests_rejected_total{{reason="{k}"}} {v}' for k, v in rejected.items()]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def complete(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return reject(400, "Malformed JSON body", "invalid_json")
        why = _invalid(body)
        if why is not None and fault != "accept_invalid":
            return reject(400 if why != "model" else 404, why, "invalid_request_error")
        if isinstance(body, dict) and body.get("model") != "fake" and fault != "accept_invalid":
            return reject(404, "unknown model", "model_not_found")
        if not isinstance(body, dict):
            body = {}
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) >= WINDOW and fault != "truncate_oversize":
            return reject(400, "prompt too long", "context_length_exceeded")
        if fault == "refuse_all":
            return reject(503, "overloaded", "overloaded", **{"Retry-After": "1"})
        max_tokens = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 16
        n = max(min(max_tokens, 6), 1) + (3 if fault == "overlong" else 0)
        if fault == "cut_streams" and body.get("stream"):
            n = min(n, 2)
        reason = "max_tokens" if n >= max_tokens or fault == "overlong" else "eos"
        if fault == "cut_streams" and body.get("stream"):
            reason = "eos"
        finish = "length" if reason == "max_tokens" else "stop"
        pieces = [WORD] * n
        stops = body.get("stop") or []
        if fault == "leak_stop" and stops:
            pieces[-1] += stops[0] if isinstance(stops, list) else stops
        finished["cancelled" if fault == "spurious_cancel" else reason] += 0 if fault == "uncounted" else 1
        termination = {"reason": reason, "layer": "model", "detail": "fake"}
        if fault == "malformed":
            return JSONResponse({"id": "x", "object": "text_completion"})
        if not body.get("stream"):
            return JSONResponse({"id": "x", "object": "text_completion", "choices": [
                {"index": 0, "text": "".join(pieces), "finish_reason": finish, "termination": termination}],
                "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})

        async def events():
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                choice = {"index": 0, "text": piece, "finish_reason": finish if last else None}
                if last:
                    choice["termination"] = termination
                yield f"data: {json.dumps({'choices': [choice]})}\n\n"
                await asyncio.sleep(0)
            yield f"data: {json.dumps({'choices': [], 'usage': {'completion_tokens': n}})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app.post("/v1/completions")(complete)
    app.post("/v1/chat/completions")(complete)
    return app
