"""User text out of the request log: what replaces a stop string or a text excerpt when --log-content is off.

Invariant relied on (stopping/sequence_stopper.py): user text enters a termination `detail` only as a
JSON string literal (json.dumps of the stop string, or of the near-loop tail). So redacting every JSON
string literal in a detail removes all user text and keeps the rest ("stop string <...> at char 12").
Client responses are not touched: they carry the real stop_reason and detail.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')   # a json.dumps string literal, escapes included


def fingerprint(text: str) -> str:
    """'<5 chars sha256:1a2b3c4d>': enough to tell two stop strings apart, nothing to read them by."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"<{len(text)} chars sha256:{digest}>"


def redact_detail(detail: str) -> str:
    """The detail with each JSON string literal replaced by its fingerprint."""
    return _JSON_STRING.sub(lambda m: fingerprint(_unquote(m.group(0))), detail)


def redact_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """A log choice record without user text: a string stop_reason and the detail are fingerprinted;
    token-id stop_reasons, counts, offsets, reasons and layers stay as they are."""
    out = dict(choice)
    if isinstance(out.get("stop_reason"), str):
        out["stop_reason"] = fingerprint(out["stop_reason"])
    if isinstance(out.get("detail"), str):
        out["detail"] = redact_detail(out["detail"])
    return out


def _unquote(literal: str) -> str:
    try:
        return json.loads(literal)
    except ValueError:   # cannot happen for json.dumps output; fingerprint the raw literal then
        return literal
