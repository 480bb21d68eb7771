"""Per-request caps on work a single request may ask for; each exceeded cap is a 400 naming its field.

The body-size limit (413) bounds bytes, not work: 1 MiB of JSON holds thousands of one-token prompts
or stop ids, and each costs per-token or per-admission work on the engine thread. These caps are checked
at the HTTP edge after the body is parsed and before anything is tokenized or queued.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from haltwise.sampling_params import ParamError


@dataclass(frozen=True, slots=True)
class RequestCaps:
    max_prompts: int = 64            # prompts in one /v1/completions request (a list prompt)
    max_sequences: int = 256         # n x prompts: the sequences one request starts (its real cost); the
                                     # default is the engine's default max_queue: a larger one never fits
    max_messages: int = 1024         # chat messages in one request (also /tokenize)
    max_stop_token_ids: int = 64     # like MAX_STOP_STRINGS for stop strings
    max_period: int = 256            # repetition_detection.max_period: its loop check costs O(max_period) per token

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


DEFAULT_CAPS = RequestCaps()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--max-prompts-per-request", type=int, default=DEFAULT_CAPS.max_prompts,
      help="prompts in one completions request (400 above)")
    a("--max-sequences-per-request", type=int, default=None,
      help="n x prompts in one request (400 above; default: --max-queue, as a larger request never fits)")


def caps_from(args: argparse.Namespace) -> RequestCaps:
    sequences = args.max_sequences_per_request or getattr(args, "max_queue", None) or DEFAULT_CAPS.max_sequences
    return RequestCaps(max_prompts=args.max_prompts_per_request, max_sequences=sequences)


def _need(ok: bool, param: str, message: str) -> None:
    if not ok:
        raise ParamError(param, message)


def check_request_caps(body: Any, caps: RequestCaps) -> None:
    """Raise ParamError(param, ...) for the first cap `body` (a parsed request model) exceeds.

    Reads only the fields a body has (completions: prompt; chat and /tokenize: messages), so every
    route can call it on its own body.
    """
    prompt = getattr(body, "prompt", None)
    prompts = 1
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompts = len(prompt)
        _need(prompts <= caps.max_prompts, "prompt",
              f"at most {caps.max_prompts} prompts per request, got {prompts}")
    messages = getattr(body, "messages", None)
    if messages is not None:
        _need(len(messages) <= caps.max_messages, "messages",
              f"at most {caps.max_messages} messages per request, got {len(messages)}")
    n = getattr(body, "n", 1)
    _need(n * prompts <= caps.max_sequences, "n",
          f"n x prompts must be at most {caps.max_sequences} sequences per request, got {n} x {prompts}")
    stop_ids = getattr(body, "stop_token_ids", None) or ()
    _need(len(stop_ids) <= caps.max_stop_token_ids, "stop_token_ids",
          f"at most {caps.max_stop_token_ids} stop_token_ids, got {len(stop_ids)}")
    detection = getattr(body, "repetition_detection", None)
    if detection is not None:
        _need(detection.max_period <= caps.max_period, "repetition_detection.max_period",
              f"repetition_detection.max_period must be at most {caps.max_period}, got {detection.max_period}")
