"""What every route of one app shares (ServerState), what one request is served by (Served), and the
checks each generation route starts with (begin).

Protocol-neutral: the surfaces (server/surfaces/) and the non-protocol routes (server/api.py) both read it;
it imports neither. The model a request names comes from the registry (haltwise.registry): begin() holds a
lease on it until the response has ended (ReleaseLeases, app.py), so a model is never unloaded under a
request or a stream.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from haltwise.errors import Overloaded
from haltwise.registry.durations import parse_keep_alive
from haltwise.registry.registry import Lease, ModelRegistry
from haltwise.sampling_params import ParamError
from haltwise.server.limits import check_request_caps
from haltwise.server.metrics import ServerMetrics

LOAD_WAIT_S = 120.0     # how long a request without a timeout may wait for its model's load or room for it
LEASES = "haltwise.leases"


@dataclass(slots=True)
class ServerState:
    """What the routes share; one per app (no module-level state)."""

    models: ModelRegistry
    metrics: ServerMetrics
    log_content: bool = False
    draining: bool = False      # set on SIGTERM: new generation requests get 503
    allow_special_tokens_in_content: bool = False  # user/tool text may spell control tokens (old rule)
    tool_call_parser: str | None = None   # --tool-call-parser; None = chosen from the chat template
    default_timeout: float | None = None  # --default-timeout: also bounds a request's wait for its model


@dataclass(slots=True)
class Served:
    """What one request is served by: the app's state and a lease on one loaded model."""

    st: ServerState
    lease: Lease

    @property
    def engine(self) -> Any:
        return self.lease.engine

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def tokenizer(self) -> Any:
        return self.lease.engine.tokenizer

    def chat_encoder(self) -> Any:
        return self.lease.entry.encoder()


def state_of(request: Request) -> ServerState:
    return request.app.state.server


def check_admitting(st: ServerState) -> None:
    if st.draining:
        raise Overloaded("the server is shutting down", retry_after=5)


async def begin(request: Request, body: Any, admitting: bool = True, caps: bool = True) -> Served:
    """The common start of a route that uses a model, every surface: the model is one we serve (404
    model_not_found), the body within the request caps (server/limits.py), the server admitting; then a
    lease on the model, loaded first if it is not (bounded by the request's timeout)."""
    st = state_of(request)
    entry = st.models.resolve(getattr(body, "model", None))
    if caps:
        check_request_caps(body, request.app.state.caps)
    if admitting:
        check_admitting(st)
    keep_alive = getattr(body, "keep_alive", None)
    if keep_alive is not None:
        try:
            keep_alive = parse_keep_alive(keep_alive)
        except ValueError as exc:
            raise ParamError("keep_alive", str(exc)) from None
    wait = getattr(body, "timeout", None) or st.default_timeout or LOAD_WAIT_S
    lease = await st.models.acquire(entry.name, keep_alive, time.monotonic() + wait)
    request.scope.setdefault(LEASES, []).append(lease)
    return Served(st, lease)


class ReleaseLeases:
    """Gives back every lease a request took once its response has ended (a stream: its last byte, or the
    client gone), whatever happened."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        leases: list[Lease] = []
        scope[LEASES] = leases
        try:
            await self.app(scope, receive, send)
        finally:
            for lease in leases:
                lease.release()
