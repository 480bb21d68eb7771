"""Errors on /v1/messages* in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.

A pure-ASGI wrapper, outermost in the app, so it reshapes every error those paths can produce (pydantic
validation, ParamError, admission 429/503, the api-key 401, the body-limit 413) without a second set
of handlers: the OpenAI-shaped body the rest of the server writes is rewritten, the status and headers
(Retry-After) are kept. Errors inside a stream are written by the surface itself (error events).
"""
from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PATH_PREFIX = "/v1/messages"
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
          503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(status: int, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Anthropic error body for an HTTP status (error.details when given, e.g. a refused `thread`)."""
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    error = {"type": kind, "message": message, **({"details": details} if details else {})}
    return {"type": "error", "error": error}


def reshape(status: int, body: bytes) -> bytes:
    """An OpenAI-shaped error body -> the Anthropic one (anything else is left as it is)."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body
    if not isinstance(error, dict) or "message" not in error:
        return body
    details = error.get("details") if isinstance(error.get("details"), dict) else None
    return json.dumps(anthropic_error(status, str(error["message"]), details)).encode()


class AnthropicErrors:
    """Rewrites JSON error responses (status >= 400) on /v1/messages* into Anthropic's shape."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PATH_PREFIX):
            return await self.app(scope, receive, send)
        start: Message | None = None
        chunks: list[bytes] = []

        async def wrapped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message                      # hold it: the body decides the new length
                return
            if start is None:
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = reshape(start["status"], b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, wrapped)
