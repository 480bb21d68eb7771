"""Issue 27: no user text in the JSON request log without --log-content (server/log_redaction.py).

The matched stop string (stop_reason, and quoted in the detail) and the near-loop detector's text tail
used to be logged verbatim. Now the log has their length and a short sha256 prefix; the client still
gets the real values.
"""
from __future__ import annotations

import json
import logging

import httpx

from haltwise.outputs import CompletionOutput, RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.server.app import build_app
from haltwise.server.metrics import ServerMetrics
from haltwise.server.request_log import RequestRecorder
from haltwise.stopping.sequence_stopper import SequenceStopper
from tests.server.http_helpers import ServerThread, tiny_engine

GREEDY = {"prompt": "the secret plan", "max_tokens": 12, "ignore_eos": True, "temperature": 0.0}


def _log_lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "haltwise.requests"]


def _stop_string(url: str) -> str:
    """A stop string the tiny model's greedy output is sure to contain: a slice of that output."""
    text = httpx.post(url + "/v1/completions", json=GREEDY, timeout=60).json()["choices"][0]["text"]
    stop = text[3:9]
    assert len(stop) >= 3 and stop.strip(), text
    return stop


def _stopped_request(url: str, stop: str, caplog) -> tuple[dict, dict]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="haltwise.requests"):
        r = httpx.post(url + "/v1/completions", json={**GREEDY, "stop": [stop]}, timeout=60)
    (line,) = _log_lines(caplog)
    return r.json()["choices"][0], line


def test_the_matched_stop_string_is_not_logged_but_still_answered(tiny_server, caplog) -> None:
    stop = _stop_string(tiny_server.url)
    choice, line = _stopped_request(tiny_server.url, stop, caplog)
    assert choice["stop_reason"] == stop and json.dumps(stop) in choice["termination"]["detail"]  # the client
    logged = line["choices"][0]
    assert json.dumps(stop, ensure_ascii=False) not in json.dumps(line, ensure_ascii=False), line
    from haltwise.server.log_redaction import fingerprint

    assert logged["reason"] == "stop_string" and logged["stop_reason"] == fingerprint(stop)
    assert logged["detail"].startswith(f"stop string {fingerprint(stop)} at char ")


def test_log_content_keeps_the_stop_string(caplog) -> None:
    with ServerThread(build_app(tiny_engine(), "tiny", log_content=True, ui=False)) as server:
        stop = _stop_string(server.url)
        _, line = _stopped_request(server.url, stop, caplog)
    assert line["choices"][0]["stop_reason"] == stop and json.dumps(stop) in line["choices"][0]["detail"]


def test_a_near_loop_tail_is_not_logged(caplog) -> None:
    """The near-loop detail quotes the last 48 characters of output: a real stopper produces it, the
    real recorder writes the log line."""
    stopper = SequenceStopper(SamplingParams(max_tokens=500), frozenset({0}), {}, num_prompt_tokens=5,
                              max_total_tokens=1000)
    term = None
    for k in range(60):     # the same object again inside itself, a counter drifting (a near loop)
        for token in [1, 2, 3, 4, 5, 6, 200 + k % 3, 13, 14]:
            term = term or stopper.on_token(token, f'my "private" {k % 3}\\ ')
    assert term is not None and term.detail.startswith("near-loop detector") and "private" in term.detail
    out = RequestOutput("r1", [1, 2, 3], [CompletionOutput(0, text="", token_ids=[1], termination=term)])
    with caplog.at_level(logging.INFO, logger="haltwise.requests"):
        RequestRecorder(ServerMetrics(lambda: None), "r1").finish(out)
    (line,) = _log_lines(caplog)
    logged = line["choices"][0]
    assert "private" not in json.dumps(line), logged
    assert logged["detail"].startswith("near-loop detector: only") and "chars sha256:" in logged["detail"]
    assert (logged["reason"], logged["token_index"]) == ("repetition", term.token_index)
