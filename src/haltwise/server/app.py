"""The app factory: routes, error handlers, metrics, and pure-ASGI guards in front of everything.

Guards, outermost first:
  edge_security -- Host allow-list, page headers, CORS (only with cors_origins), JSON content type only.
  ApiKey     -- with an api key, /v1/* and /tokenize, /detokenize need `Authorization: Bearer KEY`
                or (as Anthropic's clients send it) `x-api-key: KEY`, compared in constant time, else 401. /health, /ready, /metrics, /docs and
                /openapi.json stay unauthenticated on purpose: probes and scrapers carry no secrets.
                With protect_metrics, /metrics and /cluster need the key too.
  PerClientConcurrency -- with max_concurrent_per_client, at most N requests in flight per client, else 429
                (client_limit.py).
  BodyDeadline -- the whole body within body_timeout seconds, else 408 (connections.py).
  BodyLimit  -- reads the whole body (at most max_body_bytes) before any parsing; more is a 413.
"""
from __future__ import annotations

import contextlib
import hmac
import json
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from haltwise.server.api import router
from haltwise.server.client_limit import PerClientConcurrency
from haltwise.server.connections import DEFAULTS as CONNECTION_DEFAULTS
from haltwise.server.connections import BodyDeadline
from haltwise.server.edge_security import LOOPBACK_HOSTS, install_edge_security
from haltwise.server.errors import error_body, install_error_handlers
from haltwise.server.limits import DEFAULT_CAPS, RequestCaps
from haltwise.server.metrics import ServerMetrics
from haltwise.server.page import install_page
from haltwise.server.state import ServerState
from haltwise.server.surfaces import SURFACES
from haltwise.server.surfaces.anthropic_errors import AnthropicErrors
from haltwise.server.tracing import TraceContext

DEFAULT_MAX_BODY_BYTES = 1 << 20
PROTECTED_PREFIXES = ("/v1/", "/tokenize", "/detokenize")
OPERATOR_PREFIXES = ("/metrics", "/cluster")    # protected too with protect_metrics


async def _send_error(send: Send, status: int, message: str, code: str, headers: list | None = None) -> None:
    body = json.dumps(error_body(message, "invalid_request_error", None, code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Buffers the request body up to `limit` bytes, then replays it to the app; larger is a 413."""

    def __init__(self, app: ASGIApp, limit: int, metrics: ServerMetrics):
        self.app, self.limit, self.metrics = app, limit, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        too_big = declared is not None and (not declared.isdigit() or int(declared) > self.limit)
        chunks: list[bytes] = []
        size = 0
        while not too_big:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            too_big = size > self.limit
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if too_big:
            self.metrics.reject("request_too_large")
            return await _send_error(send, 413, f"Request body exceeds the limit of {self.limit} bytes",
                                     "request_too_large", [(b"connection", b"close")])
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class ApiKey:
    """Bearer-token check for the protected routes (constant-time compare)."""

    def __init__(self, app: ASGIApp, api_key: str, metrics: ServerMetrics, protect_metrics: bool = False):
        self.app, self.key, self.metrics = app, f"Bearer {api_key}".encode(), metrics
        self.raw_key = api_key.encode()
        self.prefixes = PROTECTED_PREFIXES + (OPERATOR_PREFIXES if protect_metrics else ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes):
            headers = dict(scope["headers"])
            bearer_ok = hmac.compare_digest(headers.get(b"authorization", b""), self.key)
            x_api_key_ok = hmac.compare_digest(headers.get(b"x-api-key", b""), self.raw_key)
            if not (bearer_ok or x_api_key_ok):
                self.metrics.reject("invalid_api_key")
                return await _send_error(send, 401, "Incorrect or missing API key (Authorization: Bearer KEY)",
                                         "invalid_api_key", [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)


def build_app(engine: Any, served_model_name: str = "SmolLM2-135M-Instruct", api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, log_content: bool = False,
              manage_engine: bool = True, shutdown_grace: float = 10.0, ui: bool = True,
              allow_special_tokens_in_content: bool = False,
              allowed_hosts: Sequence[str] = LOOPBACK_HOSTS, cors_origins: Sequence[str] = (),
              protect_metrics: bool = False, body_timeout: float = CONNECTION_DEFAULTS.body_timeout,
              docs: bool = False, caps: RequestCaps = DEFAULT_CAPS,
              max_concurrent_per_client: int | None = None, tracer: Any = None) -> FastAPI:
    """The haltwise ASGI app around `engine` (an AsyncEngine, or cluster.client.RemoteEngine).

    manage_engine: start the engine on app startup and shut it down (within shutdown_grace seconds)
    on app shutdown. Tests that share one engine between apps pass False and manage it themselves.
    ui: serve the playground page at / (server/page.py; the page is public, its API calls are not).
    allow_special_tokens_in_content: user/tool text may spell control tokens (tokenizer/untrusted.py).
    allowed_hosts, cors_origins: see edge_security.py. docs: serve /docs and /redoc (they load Swagger
    UI from a CDN, so off by default); /openapi.json is always served. caps: see limits.py.
    max_concurrent_per_client: see client_limit.py (None: no per-client limit).
    tracer: a tracing.RequestTracer (--otlp-traces-endpoint): a span per engine request; None: no tracing.
    """
    metrics = ServerMetrics(engine.stats)
    for collector in getattr(engine, "metric_collectors", list)():  # e.g. per-replica metrics of a cluster
        metrics.registry.register(collector)
    state = ServerState(engine=engine, served_model_name=served_model_name, metrics=metrics,
                        log_content=log_content, allow_special_tokens_in_content=allow_special_tokens_in_content)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_engine:
            await engine.start()
        try:
            yield
        finally:
            state.draining = True
            if manage_engine:
                await engine.shutdown(shutdown_grace)
            if tracer is not None:
                tracer.shutdown()      # flushes the spans still batched

    app = FastAPI(title="haltwise", version="0.1.0", lifespan=lifespan, strict_content_type=False,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  description="OpenAI-compatible completions with named, exact terminations.")
    app.state.server = state
    app.state.metrics = metrics
    app.state.caps = caps
    for surface in SURFACES:
        app.include_router(surface)
    app.include_router(router)
    install_error_handlers(app)
    if ui:
        install_page(app)
    app.add_middleware(BodyLimit, limit=max_body_bytes, metrics=metrics)
    app.add_middleware(BodyDeadline, timeout=body_timeout)
    if max_concurrent_per_client:  # inside the key check: an unauthenticated request never takes a slot
        app.add_middleware(PerClientConcurrency, limit=max_concurrent_per_client, keyed=bool(api_key))
    if api_key:  # added after the body guards = outside them: unauthenticated bodies are never buffered
        app.add_middleware(ApiKey, api_key=api_key, metrics=metrics, protect_metrics=protect_metrics)
    elif protect_metrics:
        raise ValueError("protect_metrics needs an api_key")
    if tracer is not None:
        app.add_middleware(TraceContext, tracer=tracer)
    install_edge_security(app, allowed_hosts, cors_origins)
    app.add_middleware(AnthropicErrors)  # outermost: every error on /v1/messages* in Anthropic's shape
    return app
