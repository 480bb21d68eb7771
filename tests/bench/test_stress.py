"""`haltwise stress`: the accounting and invariants as pure functions, and a short real run against a
tiny-model server with a small KV pool and queue (rejections and preemptions happen)."""
from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from typing import Iterator

import pytest

from haltwise.bench import stress
from haltwise.bench.stress_report import Result, build_report, outcome_for_status, parse_metrics
from haltwise.config import EngineConfig
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread

POOL = 20 * 8192  # 20 blocks of 16 tokens on the tiny model (512 bytes per token)


def _args(**over) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    stress.add_arguments(parser)
    args = parser.parse_args([])
    for k, v in over.items():
        setattr(args, k, v)
    return args


def test_defaults_and_remote_refusal(capsys) -> None:
    args = _args()
    assert (args.url, args.clients, args.duration, args.disconnect_rate, args.invalid_rate) == \
        ("http://127.0.0.1:8000", 64, 120.0, 0.2, 0.1)
    assert stress.is_loopback("http://localhost:1") and stress.is_loopback("http://[::1]:8000")
    assert not stress.is_loopback("http://10.0.0.8:8000") and not stress.is_loopback("http://example.com")
    assert stress.run(_args(url="http://192.0.2.1:8000")) == 2  # refused before any connection
    assert "--allow-remote" in capsys.readouterr().out
    assert stress.run(_args(url="http://127.0.0.1:1", duration=1.0)) == 2  # nothing listens: a message, no traceback
    assert "cannot use the server" in capsys.readouterr().out
    with pytest.raises(ValueError):
        stress.StressConfig("http://127.0.0.1:1", clients=0)


def test_plan_mix_is_seeded_and_covers_every_kind() -> None:
    cfg = stress.StressConfig("http://127.0.0.1:1", invalid_rate=0.2, oversize_rate=0.1)
    plans = [stress.plan_request(random.Random(7), cfg, "m", 256) for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]
    rng = random.Random(1)
    many = [stress.plan_request(rng, cfg, "m", 256) for _ in range(400)]
    kinds = Counter(p.kind for p in many)
    assert set(kinds) == {"valid", "invalid", "oversize"} and kinds["valid"] > kinds["invalid"] > kinds["oversize"]
    assert any(isinstance(p.body, bytes) for p in many) and any(p.stream for p in many)
    assert any(p.disconnect_after is not None for p in many)
    assert all(len(p.body["prompt"]) > 256 for p in many if p.kind == "oversize")
    assert all(p.body["max_tokens"] <= cfg.max_tokens for p in many if p.kind == "valid")


def test_outcomes_and_invariants_can_fail() -> None:
    assert outcome_for_status(503, "overloaded", True) == "rejected/503"
    assert outcome_for_status(503, "engine_error", False) == "error/5xx"
    assert outcome_for_status(500, "internal_error", False) == "error/5xx"
    assert outcome_for_status(429, None, True) == "rejected/429" and outcome_for_status(413, None, False) == "rejected/4xx"
    samples = parse_metrics('# HELP x\nhaltwise_kv_blocks_used 3.0\nhaltwise_requests_finished_total'
                            '{finish_reason="stop",termination_reason="eos"} 2.0\n')
    assert samples[("haltwise_kv_blocks_used", ())] == 3.0
    good = [Result("valid", "completed/eos", 200, False, None, 0.1, 5), Result("invalid", "rejected/4xx", 400, False)]
    idle = parse_metrics("haltwise_kv_blocks_used 0\nhaltwise_requests_running 0\n")
    assert build_report(good, 2, 1.0, {}, {}, idle, True)["ok"]
    leaked = build_report(good, 2, 1.0, {}, {}, samples, False)
    assert not leaked["ok"] and not leaked["invariants"]["no_kv_blocks_leaked"]
    bad = build_report(good + [Result("valid", "error/5xx", 500, True)], 3, 1.0, {}, {}, idle, True)
    assert not bad["invariants"]["no_5xx_for_valid_requests"] and not bad["invariants"]["no_500_at_all"]
    assert not build_report(good, 3, 1.0, {}, {}, idle, True)["invariants"]["every_request_accounted_once"]


@pytest.fixture(scope="module")
def small_server() -> Iterator[ServerThread]:
    from haltwise.engine.async_engine import AsyncEngine

    config = EngineConfig(kv_cache_memory=POOL, max_model_len=256, max_queue=2)
    with ServerThread(build_app(AsyncEngine.build(engine_config=config, tiny=True), "tiny")) as server:
        yield server


def test_short_stress_run_keeps_every_invariant(small_server, tmp_path, capsys) -> None:
    out = tmp_path / "stress.json"
    code = stress.run(_args(url=small_server.url, clients=8, duration=60.0, requests=60, max_tokens=48,
                            invalid_rate=0.15, disconnect_rate=0.2, drain_timeout=60.0, seed=3, json=str(out)))
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert code == 0, printed
    assert report["ok"] and all(report["invariants"].values()), printed
    req = report["requests"]
    assert req["issued"] == req["accounted"] == sum(req["by_outcome"].values()) == 60
    assert report["failures"]["5xx_or_error_for_valid"] == 0 and report["failures"]["status_500"] == 0
    assert report["server"]["kv_blocks_used_after_drain"] == 0 and report["server"]["requests_running_after_drain"] == 0
    invalid = req["by_kind"]["invalid"]
    assert invalid and set(invalid) <= {"rejected/4xx", "cancelled_by_client"}  # never accepted, never a 5xx
    assert any(k.startswith("completed/") for k in req["by_outcome"])
    assert "every_request_accounted_once" in printed and "p95" in printed
