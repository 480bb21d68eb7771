"""SPEC §5: exactly one JSON log line per finished request (none for a refused one), no user text by
default, over the real server (tiny model)."""
from __future__ import annotations

import json
import logging

import httpx
import pytest

from haltwise.server.request_log import RequestRecorder


def lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "haltwise.requests"]


def send_mix(url: str) -> None:
    base = {"prompt": "secret words", "max_tokens": 4, "ignore_eos": True}
    assert httpx.post(url + "/v1/completions", json=base, timeout=60).status_code == 200
    with httpx.stream("POST", url + "/v1/completions", json={**base, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and list(r.iter_lines())
    chat = {"messages": [{"role": "user", "content": "secret words"}], "max_tokens": 3, "n": 2}
    assert httpx.post(url + "/v1/chat/completions", json=chat, timeout=60).status_code == 200
    assert httpx.post(url + "/v1/completions", json={**base, "max_tokens": 0}, timeout=60).status_code == 400


def check_one_line_per_request(caplog, url: str) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="haltwise.requests"):
        send_mix(url)
    got = lines(caplog)
    assert len(got) == 3, got  # three finished, one refused (no line)
    assert len({g["request_id"] for g in got}) == 3
    assert [len(g["choices"]) for g in got] == [1, 1, 2]
    assert all(g["event"] == "request_finished" and g["completion_tokens"] >= 1 for g in got)
    assert all("secret" not in json.dumps(g) for g in got)  # no user text unless --log-content


def test_one_json_line_per_finished_request(tiny_server, caplog) -> None:
    check_one_line_per_request(caplog, tiny_server.url)


def test_the_count_catches_a_recorder_that_logs_twice(tiny_server, caplog, monkeypatch) -> None:
    """Named fault: every finished request is written twice."""
    real = RequestRecorder._write

    def twice(self, *args):
        real(self, *args)
        real(self, *args)

    monkeypatch.setattr(RequestRecorder, "_write", twice)
    with pytest.raises(AssertionError):
        check_one_line_per_request(caplog, tiny_server.url)
