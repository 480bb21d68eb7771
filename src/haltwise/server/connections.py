"""Connection limits: slow or idle clients cannot pin the server's connections or workers.

Timeline of one connection, and the limit that closes it (defaults in DEFAULTS, flags in add_arguments):

    connect --[head]--> request head parsed --[body]--> body complete --> response ... --[idle]--> next byte
             <= header_timeout                <= body_timeout                          <= keep_alive
             (closed, no answer)              (408, then closed)                       (closed)

- header_timeout: uvicorn's h11 protocol has none of its own (its keep-alive timer is cancelled by the
  first byte of a request and never armed on a fresh connection), so HeadTimeoutH11 arms one timer
  from the connection's start, or from the first byte of a following request, to the complete head.
- body_timeout: BodyDeadline bounds reading the whole body (the BodyLimit guard buffers it) -> 408.
- keep_alive: uvicorn's timeout_keep_alive, between a response and the next request's first byte.
- limit_concurrency: requests get 503 while this many connections or tasks are open. uvicorn's own answer
  is plain text; HeadTimeoutH11 takes the cap over and answers OpenAI-shaped JSON with Retry-After.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from haltwise.server.edge_security import send_error


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float = 10.0     # s from connect (or a request's first byte) to its complete head
    body_timeout: float = 30.0       # s to read a whole body (1 MiB at >= 35 KB/s); then 408
    keep_alive: float = 5.0          # s an idle keep-alive connection stays open (uvicorn's default)
    limit_concurrency: int = 512     # open connections/tasks before uvicorn answers 503
    backlog: int = 2048              # pending TCP accepts (uvicorn's default)

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "keep_alive"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.limit_concurrency < 1:
            raise ValueError(f"limit_concurrency must be >= 1, got {self.limit_concurrency}")


DEFAULTS = ConnectionLimits()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The connection options of `haltwise serve`."""
    a = parser.add_argument
    a("--header-timeout", type=float, default=DEFAULTS.header_timeout,
      help="seconds a connection may take to send a request's line and headers, else it is closed")
    a("--body-timeout", type=float, default=DEFAULTS.body_timeout,
      help="seconds a client may take to send a request body, else 408")
    a("--keep-alive-timeout", type=float, default=DEFAULTS.keep_alive,
      help="seconds an idle HTTP keep-alive connection stays open (not --model-keep-alive, a model's idle time)")
    a("--max-connections", type=int, default=DEFAULTS.limit_concurrency,
      help="open connections (or running requests) before new requests get 503")


def limits_from(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                            keep_alive=args.keep_alive_timeout, limit_concurrency=args.max_connections)


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol plus a request-head deadline (class attribute set by protocol_class), and the
    connection cap answered as JSON.

    Invariant: while the peer is between requests with bytes pending (h11 state IDLE, not closed) exactly
    one head timer is armed; it is cancelled as soon as h11 has parsed the head (state leaves IDLE).
    """

    header_timeout: float = DEFAULTS.header_timeout

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # uvicorn's cap check (before the request's task exists) would send its plain-text 503; the same
        # check runs here inside the task instead, where the task itself is already counted.
        self._cap, self.limit_concurrency = self.limit_concurrency, None
        self.app = functools.partial(self._capped, self.app)

    async def _capped(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        cap = self._cap
        if cap is not None and scope["type"] == "http" and (
                len(self.connections) >= cap or len(self.tasks) > cap):
            return await send_error(send, 503, f"The server has {cap} open connections or requests "
                                    "(--max-connections); retry later", "server_overloaded",
                                    headers=[(b"retry-after", b"1"), (b"connection", b"close")])
        await app(scope, receive, send)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(self.header_timeout, self._head_late)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting_for_head = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting_for_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_late)
        elif not waiting_for_head:
            self._cancel_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def protocol_class(header_timeout: float) -> type[HeadTimeoutH11]:
    return type("HeadTimeoutH11", (HeadTimeoutH11,), {"header_timeout": header_timeout})


class _BodyLate(Exception):
    pass


class BodyDeadline:
    """Reading the request body must finish within `timeout` seconds of the request's start, else 408.

    Only the body is timed: once a message without more_body (or a disconnect) arrived, receive() is
    passed through unbounded (streaming responses wait on it for the client's disconnect).
    """

    def __init__(self, app: ASGIApp, timeout: float):
        self.app, self.timeout = app, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _BodyLate from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except _BodyLate:
            if not started:
                await send_error(send, 408, f"The request body was not received within {self.timeout:g} s",
                                 "request_timeout", headers=[(b"connection", b"close")])


def uvicorn_config(app: Any, host: str, port: int, limits: ConnectionLimits, **kwargs: Any) -> uvicorn.Config:
    """uvicorn settings for haltwise: h11 with the head timer, keep-alive, connection cap, backlog."""
    return uvicorn.Config(app, host=host, port=port, http=protocol_class(limits.header_timeout),
                          timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type]
                          limit_concurrency=limits.limit_concurrency, backlog=limits.backlog, **kwargs)
