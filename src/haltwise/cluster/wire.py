"""What crosses the ingress/replica boundary.

A replica's generate() stream is:   ("replica", id)   then RequestOutput ...   or ("error", fields) last.
Errors travel as plain fields, not pickled exceptions: an exception's pickle keeps only its message,
which would lose param, code and retry_after (and with them the HTTP status and Retry-After).
"""
from __future__ import annotations

from typing import Any

from haltwise import errors
from haltwise.errors import HaltwiseError
from haltwise.registry.lease import InsufficientMemory, ModelBusy

REPLICA = "replica"
ERROR = "error"
_KINDS = {cls.__name__: cls for cls in (errors.HaltwiseError, errors.InvalidRequest, errors.ContextLengthExceeded,
                                        errors.ModelNotFound, errors.RequestTooLarge, errors.Overloaded,
                                        errors.EngineFailure, InsufficientMemory, ModelBusy)}


def encode_error(exc: HaltwiseError) -> tuple[str, dict[str, Any]]:
    kind = type(exc).__name__ if type(exc).__name__ in _KINDS else "HaltwiseError"
    return ERROR, {"kind": kind, "message": exc.message, "param": exc.param, "code": exc.code,
                   "retry_after": exc.retry_after}


def decode_error(fields: dict[str, Any]) -> HaltwiseError:
    cls = _KINDS.get(fields.get("kind", ""), errors.EngineFailure)
    return cls(fields.get("message", "replica error"), param=fields.get("param"), code=fields.get("code"),
               retry_after=fields.get("retry_after"))


def is_marker(item: Any, kind: str) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and item[0] == kind
