"""Keep-alive durations, as Ollama writes them: "5m", "30s", "1h30m", "250ms", a number of seconds,
0 (unload as soon as the model is idle) or any negative value (keep it loaded for ever)."""
from __future__ import annotations

import math
import re

FOREVER = math.inf
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value: str | int | float) -> float:
    """Seconds (FOREVER for a negative value); ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            parts = _PART.findall(body)
            if not parts or "".join(n + u for n, u in parts) != body:
                raise ValueError(f"not a duration: {value!r} (e.g. 5m, 30s, 1h, 0, -1)") from None
            seconds = sign * sum(float(n) * _UNIT[u] for n, u in parts)
    if math.isnan(seconds):
        raise ValueError(f"not a duration: {value!r}")
    return FOREVER if seconds < 0 else seconds


def describe(seconds: float) -> str:
    return "forever" if seconds == FOREVER else f"{seconds:g}s"
