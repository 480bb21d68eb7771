"""Every error leaves the server as `{"error": {"message", "type", "param", "code"}}` with its status.

A bad request (validation, malformed JSON, ParamError, engine-side InvalidRequest) is always a 4xx;
only an unexpected exception becomes a 500, in the same shape.
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from haltwise.errors import HaltwiseError
from haltwise.sampling_params import ParamError

log = logging.getLogger("haltwise.server")


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param, code), status_code=status, headers=headers)


def haltwise_error_response(exc: HaltwiseError) -> JSONResponse:
    headers = None
    if exc.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
    return JSONResponse(exc.to_body(), status_code=exc.status, headers=headers)


def param_error_response(exc: ParamError) -> JSONResponse:
    """400 with param; a ParamError with `details` (a dict) carries them as error.details."""
    body = error_body(str(exc), param=exc.param)
    details = getattr(exc, "details", None)
    if isinstance(details, dict):
        body["error"]["details"] = details
    return JSONResponse(body, status_code=400)


def _param_from_loc(loc: tuple[Any, ...]) -> str | None:
    """('body', 'messages', 0, 'content', 'str') -> 'messages[0].content'.

    Pydantic adds union member tags (e.g. 'str', 'list[int]') to the location; they are not fields.
    """
    parts: list[str] = []
    for item in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(item, int):
            if parts:
                parts[-1] += f"[{item}]"
        elif any(c in item for c in "[]-") or item in ("str", "int", "float", "bool", "dict", "list"):
            continue
        else:
            parts.append(item)
    return ".".join(parts) or None


def validation_error_response(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"type": "invalid", "loc": (), "msg": "invalid request"}
    kind, loc = first.get("type"), tuple(first.get("loc", ()))
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return error_response(400, f"Malformed JSON body: {detail}".rstrip(": "), code="invalid_json")
    param = _param_from_loc(loc)
    if kind == "extra_forbidden":
        return error_response(400, f"Unrecognized request argument supplied: {param}", param=param)
    if param is None and kind in ("model_attributes_type", "dict_type"):
        return error_response(400, "The request body must be a JSON object (Content-Type: application/json)")
    if kind == "missing" and param is None:
        return error_response(400, "A JSON request body is required")
    if param is None:
        return error_response(400, f"Request body is invalid: {first.get('msg')}")
    shown = [e for e in errors if _param_from_loc(tuple(e.get("loc", ()))) == param]
    message = "; ".join(sorted({str(e.get("msg")) for e in shown}))
    return error_response(400, f"Invalid value for '{param}': {message}", param=param)


def count_rejection(request: Request, response: JSONResponse) -> JSONResponse:
    """Count an error response in haltwise_requests_rejected_total{reason=code or type}."""
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        error = json.loads(bytes(response.body)).get("error", {})
        metrics.reject(error.get("code") or error.get("type"))
    return response


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the OpenAI shape."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return count_rejection(request, validation_error_response(exc))

    @app.exception_handler(ParamError)
    async def _param(request: Request, exc: ParamError) -> JSONResponse:
        return count_rejection(request, param_error_response(exc))

    @app.exception_handler(HaltwiseError)
    async def _haltwise(request: Request, exc: HaltwiseError) -> JSONResponse:
        return count_rejection(request, haltwise_error_response(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return count_rejection(request, error_response(exc.status_code, str(exc.detail), type_=type_, code=code,
                                                       headers=getattr(exc, "headers", None)))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return count_rejection(request, error_response(500, "Internal server error", type_="server_error",
                                                       code="internal_error"))
