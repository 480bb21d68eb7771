"""Errors cross the replica boundary with their status, code, param and Retry-After intact."""
from __future__ import annotations

import pickle

from haltwise.cluster.wire import ERROR, decode_error, encode_error, is_marker
from haltwise.errors import ContextLengthExceeded, EngineFailure, Overloaded


def test_error_round_trip_keeps_what_the_http_answer_needs() -> None:
    for exc in (Overloaded("queue full", retry_after=2.5), ContextLengthExceeded("too long", param="max_tokens"),
                EngineFailure("step failed")):
        item = pickle.loads(pickle.dumps(encode_error(exc)))  # what Ray does to a yielded item
        assert is_marker(item, ERROR)
        back = decode_error(item[1])
        assert type(back) is type(exc)
        assert (back.status, back.code, back.param, back.retry_after, back.message) == \
               (exc.status, exc.code, exc.param, exc.retry_after, exc.message)


def test_an_unknown_kind_becomes_an_engine_failure() -> None:
    back = decode_error({"kind": "Nope", "message": "?"})
    assert isinstance(back, EngineFailure) and back.status == 503
