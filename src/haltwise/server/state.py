"""What every route of one app shares (ServerState), and the checks each generation route starts with.

Protocol-neutral: the surfaces (server/surfaces/) and the non-protocol routes (server/api.py) both read it;
it imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from haltwise.errors import ModelNotFound, Overloaded
from haltwise.server.limits import check_request_caps
from haltwise.server.metrics import ServerMetrics


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


def state_of(request: Request) -> ServerState:
    return request.app.state.server


def check_model(st: ServerState, model: str | None) -> None:
    """A request naming a model names the served one (None: the served one)."""
    if model is not None and model != st.served_model_name:
        raise ModelNotFound(f"The model '{model}' does not exist; this server serves '{st.served_model_name}'",
                            param="model")


def check_admitting(st: ServerState) -> None:
    if st.draining:
        raise Overloaded("the server is shutting down", retry_after=5)


def begin(request: Request, body: Any) -> ServerState:
    """The common start of a generation route, every surface: the model is ours, the body within the
    request caps (server/limits.py: messages, max_period), and the server is admitting."""
    st = state_of(request)
    check_model(st, body.model)
    check_request_caps(body, request.app.state.caps)
    check_admitting(st)
    return st
