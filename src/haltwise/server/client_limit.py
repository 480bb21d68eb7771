"""Per-client concurrency limit (`--max-concurrent-per-client N`, off by default): one client cannot take
every engine slot and connection by itself.

    client = the API key the request presents (Authorization: Bearer KEY or x-api-key), when the server
             has a key (so every holder of one key shares its limit); else the remote address

A request to a generation or tokenizer route (/v1/*, /tokenize, /detokenize) while its client already has
N in flight is answered at once: 429, OpenAI-shaped (Anthropic-shaped on /v1/messages), with Retry-After.
A request is in flight from its arrival to the end of its response (a stream: until its last event).
Probes (/health, /ready), /metrics and the page are never limited.
"""
from __future__ import annotations

import hashlib
from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send

from haltwise.server.edge_security import send_error

LIMITED_PREFIXES = ("/v1/", "/tokenize", "/detokenize")
RETRY_AFTER_S = 1


def client_of(scope: Scope, keyed: bool) -> str:
    """The client a request counts against (a key is kept only as a digest)."""
    if keyed:
        headers = dict(scope["headers"])
        presented = headers.get(b"authorization") or headers.get(b"x-api-key") or b""
        return "key:" + hashlib.sha256(presented.removeprefix(b"Bearer ")).hexdigest()[:16]
    client = scope.get("client")
    return f"addr:{client[0]}" if client else "addr:?"


class PerClientConcurrency:
    """ASGI guard: at most `limit` requests in flight per client, else 429 + Retry-After."""

    def __init__(self, app: ASGIApp, limit: int, keyed: bool):
        if limit < 1:
            raise ValueError(f"max_concurrent_per_client must be >= 1, got {limit}")
        self.app, self.limit, self.keyed = app, limit, keyed
        self.in_flight: Counter[str] = Counter()   # only the event loop touches it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(LIMITED_PREFIXES):
            return await self.app(scope, receive, send)
        client = client_of(scope, self.keyed)
        if self.in_flight[client] >= self.limit:
            return await send_error(
                send, 429, f"Too many concurrent requests from this client: at most {self.limit} at a time "
                           f"(--max-concurrent-per-client); retry after {RETRY_AFTER_S} s",
                "rate_limit_exceeded", headers=[(b"retry-after", str(RETRY_AFTER_S).encode())])
        self.in_flight[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]
