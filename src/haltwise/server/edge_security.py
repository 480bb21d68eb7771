"""Browser-safety guards at the HTTP edge: a keyless loopback server cannot be driven by a web page.

A page on another origin can make "simple" cross-site requests (no CORS preflight) with a text/plain,
form or multipart body, and with DNS rebinding it can even read the answers under its own host name.
Guards, outermost first (all pure ASGI, all answer with the OpenAI error shape):
  HostGuard   -- the Host header must name an allowed host, else 400. Rebinding always carries the
                 attacker's host *name*, so the loopback default (localhost, 127.0.0.1, [::1]) blocks it.
  PageHeaders -- the page (`/`, `/ui/*`) gets a CSP allowing only its own files, no framing, nosniff;
                 every response gets nosniff.
  CORS        -- off (no Access-Control-* headers at all) unless `cors_origins` lists origins; then
                 Starlette's CORSMiddleware answers preflights for exactly those origins.
  JsonOnly    -- every POST/PUT/PATCH needs `Content-Type: application/json` (any parameters), else 415:
                 a cross-site simple request can never carry that type without a preflight.
"""
from __future__ import annotations

import ipaddress
import json
from typing import Iterable, Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from haltwise.server.errors import error_body

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
JSON_METHODS = frozenset({"POST", "PUT", "PATCH"})
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def send_error(send: Send, status: int, message: str, code: str | None, param: str | None = None,
                     headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """An OpenAI-shaped error response straight from a guard (the app never sees the request)."""
    body = json.dumps(error_body(message, "invalid_request_error", param, code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def is_loopback(host: str) -> bool:
    """True for a bind address that only local processes can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind_host: str) -> tuple[str, ...]:
    """The Host names accepted when --allowed-hosts is not given.

    Loopback bind: the loopback names only. Other binds: also any IP literal ("ip"), since a rebinding
    attack always arrives under a host *name*; names (e.g. a DNS name of this machine) need --allowed-hosts.
    """
    return LOOPBACK_HOSTS if is_loopback(bind_host) else (*LOOPBACK_HOSTS, "ip")


def host_name(header: bytes) -> str:
    """'Example.COM:8000' -> 'example.com'; '[::1]:8000' -> '[::1]'; malformed -> ''."""
    try:
        text = header.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return ""
    if text.startswith("["):
        end = text.find("]")
        return text[:end + 1] if end > 0 and text[end + 1:end + 2] in ("", ":") else ""
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else ("" if ":" in text else text)


def host_allowed(name: str, allowed: Sequence[str]) -> bool:
    """Django-style matching: '*' any host, '.example.com' the domain and its subdomains, 'ip' any IP literal."""
    if not name:
        return False
    for pattern in allowed:
        if pattern == "*" or pattern == name:
            return True
        if pattern.startswith(".") and (name.endswith(pattern) or name == pattern[1:]):
            return True
        if pattern == "ip":
            try:
                ipaddress.ip_address(name.strip("[]"))
                return True
            except ValueError:
                pass
    return False


class HostGuard:
    """400 unless the Host header names an allowed host (see host_allowed)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]):
        self.app, self.allowed = app, tuple(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "*" not in self.allowed:
            header = dict(scope["headers"]).get(b"host", b"")
            if not host_allowed(host_name(header), self.allowed):
                shown = header.decode("latin-1")[:100]
                return await send_error(send, 400, f"Host {shown!r} is not allowed; this server answers to "
                                        f"{', '.join(self.allowed)} (set --allowed-hosts to add names)",
                                        "invalid_host", headers=[(b"connection", b"close")])
        await self.app(scope, receive, send)


def is_json(content_type: bytes | None) -> bool:
    """True for `application/json`, with any parameters (e.g. `; charset=utf-8`), in any case."""
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].strip().lower() == b"application/json"


class JsonOnly:
    """415 for a POST/PUT/PATCH whose Content-Type is not application/json (absent included)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in JSON_METHODS:
            if not is_json(dict(scope["headers"]).get(b"content-type")):
                return await send_error(send, 415, "Content-Type must be application/json",
                                        "unsupported_media_type", param="Content-Type")
        await self.app(scope, receive, send)


class PageHeaders:
    """nosniff on every response; on the page and its files also the CSP and no framing."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        page = scope["path"] == "/" or scope["path"].startswith("/ui/")
        extra = [(b"x-content-type-options", b"nosniff")]
        if page:
            extra += [(b"content-security-policy", PAGE_CSP.encode()), (b"x-frame-options", b"DENY"),
                      (b"referrer-policy", b"no-referrer")]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_edge_security(app: FastAPI, allowed_hosts: Sequence[str], cors_origins: Sequence[str]) -> None:
    """Add the guards; call after every other middleware so that they run first (outermost)."""
    app.add_middleware(JsonOnly)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], max_age=600)
    app.add_middleware(PageHeaders)
    app.add_middleware(HostGuard, allowed_hosts=allowed_hosts)
