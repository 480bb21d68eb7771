"""The request mix of `haltwise stress`: its settings, and one planned request (valid, invalid or oversize) at a time.

Each plan is drawn from a seeded random.Random, so a run's mix is reproducible; stress.py sends the plans.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from haltwise.server.edge_security import is_loopback as loopback_host

PROMPTS = (
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three prime numbers and say why they are prime.",
    "Once upon a time, in a small village by the mountains,",
    "def fibonacci(n):\n    ",
    "Traduis en français : the weather is nice today. 天气很好。😀",
    "Repeat after me: la la la la la la la la la la la la",
    "Q: What is the capital of France?\nA:",
)
STOPS = (None, ["\n"], [".", "!"], ["the"], ["<|im_end|>"], ["\n\n", "Q:"])
# Token-id prompts use ids every vocabulary here has (the tiny test model has 512): an id outside the
# vocabulary is a 400 for another reason, and an "oversize" prompt of such ids never tests the length.
TOKEN_IDS = (100, 499)
INVALID = ("bad_param", "malformed_json", "unknown_field", "wrong_type", "unknown_model", "not_an_object",
           "empty_stop")


@dataclass(frozen=True, slots=True)
class StressConfig:
    url: str
    clients: int = 64               # concurrent clients
    duration: float = 120.0         # seconds to keep sending (then stop and drain)
    requests: int | None = None     # total request budget (None = only the duration bounds it)
    max_tokens: int = 64            # upper bound of each valid request's max_tokens
    stream_rate: float = 0.5        # share of valid requests that stream
    chat_rate: float = 0.5          # share sent to /v1/chat/completions
    disconnect_rate: float = 0.2    # share whose client disconnects at a random point
    invalid_rate: float = 0.1       # share of invalid requests
    oversize_rate: float = 0.05     # share with a prompt longer than the window
    deadline_rate: float = 0.15     # share with a short `timeout` (0.2-3 s)
    request_timeout: float = 120.0  # server-side deadline sent with every other valid request
    drain_timeout: float = 120.0    # seconds to wait for the server to go idle afterwards
    seed: int = 0
    max_refused_share: float = 0.5  # of the valid requests the server answered, at most this share refused
    deadline_slack_s: float = 5.0   # a completed request with `timeout` must end within timeout + this

    def __post_init__(self) -> None:
        if self.clients < 1 or self.duration <= 0 or (self.requests is not None and self.requests < 1):
            raise ValueError("--clients, --duration and --requests must be positive")
        for name in ("stream_rate", "chat_rate", "disconnect_rate", "invalid_rate", "oversize_rate", "deadline_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")


def is_loopback(url: str) -> bool:
    """Whether the URL's host is a loopback name or address (the server's own rule)."""
    return loopback_host(urlsplit(url).hostname or "")


@dataclass(frozen=True, slots=True)
class Plan:
    """One request to send: its kind, route, body (JSON or raw bytes) and when the client gives up."""

    kind: str
    path: str
    body: Any
    stream: bool
    disconnect_after: float | None  # seconds after sending; None = read to the end


def plan_request(rng: random.Random, cfg: StressConfig, model: str, window: int) -> Plan:
    """Draw one request of the mix."""
    chat = rng.random() < cfg.chat_rate
    path = "/v1/chat/completions" if chat else "/v1/completions"
    stream = rng.random() < cfg.stream_rate
    disconnect = rng.uniform(0.0, 3.0) if rng.random() < cfg.disconnect_rate else None
    text = rng.choice(PROMPTS)
    if rng.random() < 0.15:
        text = " ".join([text] * rng.randint(5, 20))  # long: chunked prefill, more KV
    body: dict[str, Any] = {"model": model, "max_tokens": rng.randint(1, cfg.max_tokens), "stream": stream,
                            "temperature": rng.choice([0.0, 0.7, 1.0]), "seed": rng.randint(0, 2**31)}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text if rng.random() < 0.8 else [rng.randint(*TOKEN_IDS) for _ in range(rng.randint(1, 40))]
    if stop := rng.choice(STOPS):
        body["stop"] = stop
    if stream:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < cfg.deadline_rate:
        body["timeout"] = round(rng.uniform(0.2, 3.0), 2)
    elif rng.random() < 0.5:
        body["timeout"] = cfg.request_timeout
    roll = rng.random()
    if roll < cfg.invalid_rate:
        return Plan("invalid", path, invalid_body(rng, body), stream, disconnect)
    if roll < cfg.invalid_rate + cfg.oversize_rate:
        long_prompt = [rng.randint(*TOKEN_IDS) for _ in range(window + rng.randint(1, 64))]
        body.pop("messages", None)
        body.update(prompt=long_prompt)
        return Plan("oversize", "/v1/completions", body, stream, disconnect)
    return Plan("valid", path, body, stream, disconnect)


def invalid_body(rng: random.Random, body: dict[str, Any]) -> Any:
    """Spoil a valid body in one of several ways; bytes are sent as they are."""
    kind = rng.choice(INVALID)
    body = dict(body)
    if kind == "bad_param":
        key, value = rng.choice([("temperature", 5.0), ("max_tokens", 0), ("top_p", 0.0), ("n", 0),
                                 ("max_tokens", -3), ("top_p", 1.5)])
        body[key] = value
    elif kind == "malformed_json":
        return json.dumps(body).encode()[: rng.randint(1, 20)]
    elif kind == "unknown_field":
        body["frobnicate"] = True
    elif kind == "wrong_type":
        body["max_tokens"] = "many"
    elif kind == "unknown_model":
        body["model"] = "no-such-model"
    elif kind == "not_an_object":
        return b"[1, 2, 3]"
    else:
        body["stop"] = [""]
    return body
