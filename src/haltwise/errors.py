"""Errors that cross the engine/server boundary, each knowing its OpenAI error shape and HTTP status."""
from __future__ import annotations


class HaltwiseError(Exception):
    """Base: `status` is the HTTP status; `type`, `param` and `code` fill the OpenAI error body."""

    status: int = 400
    type: str = "invalid_request_error"
    code: str | None = None

    def __init__(self, message: str, param: str | None = None, code: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.retry_after = retry_after  # seconds, sent as Retry-After when set

    def to_body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(HaltwiseError):
    """A parameter is out of range or of the wrong type (400)."""


class ContextLengthExceeded(HaltwiseError):
    """Prompt, or prompt + max_tokens, does not fit the window (400; the message gives the numbers)."""

    code = "context_length_exceeded"


class ModelNotFound(HaltwiseError):
    status = 404
    code = "model_not_found"


class RequestTooLarge(HaltwiseError):
    """The projected KV need can never fit the pool (400)."""

    code = "request_too_large"


class Overloaded(HaltwiseError):
    """Admission queue full, or the breaker is open: try again later (503 + Retry-After)."""

    status = 503
    type = "server_error"
    code = "overloaded"


class EngineFailure(HaltwiseError):
    """The engine step failed or hung for this request (503 for a non-stream request)."""

    status = 503
    type = "server_error"
    code = "engine_error"


class ModelLoadError(ValueError):
    """A model file or directory is missing, malformed, or uses something haltwise does not support.

    The one error the model path (gguf/, models/, tokenizer/) raises for a model on disk. The message always
    names the path and what is wrong, so callers can show it as is.
    """
