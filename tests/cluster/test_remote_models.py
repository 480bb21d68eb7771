"""GET /v1/models at the ingress of several models on replicas: the replicas' reports merged."""
from __future__ import annotations

import pytest

pytest.importorskip("ray.serve", reason="the cluster extra is not installed")

from haltwise.cluster.remote_models import merged_listing  # noqa: E402


def _row(status: str, tokens: int = 0, resident: int = 0, in_flight: int = 0) -> dict:
    row = {"status": {"value": status}}
    if status == "loaded":
        row.update(max_model_len=2048, kv_capacity={"tokens": tokens, "bytes": tokens * 10, "blocks": tokens // 16},
                   resident_bytes=resident, in_flight=in_flight, keep_alive=300.0)
    return row


def test_loaded_on_any_replica_is_loaded_with_its_replicas_and_sums() -> None:
    replicas = [{"id": "r1", "models": {"a": _row("loaded", 1024, 700, 1), "b": _row("loading")}},
                {"id": "r2", "models": {"a": _row("loaded", 512, 600, 2)}},
                {"id": "r3"}]                                   # starting: no report yet
    a, b, c = merged_listing(["a", "b", "c"], replicas)
    assert a["status"] == {"value": "loaded"} and a["max_model_len"] == 2048
    assert a["kv_capacity"] == {"tokens": 1536, "bytes": 15360, "blocks": 96}
    assert a["resident_bytes"] == 1300 and a["in_flight"] == 3
    assert [(r["id"], r["status"], r["in_flight"]) for r in a["replicas"]] == [("r1", "loaded", 1), ("r2", "loaded", 2)]
    assert b["status"] == {"value": "loading"} and [r["id"] for r in b["replicas"]] == ["r1"]
    assert "kv_capacity" not in b
    assert c == {"id": "c", "object": "model", "created": 0, "owned_by": "haltwise", "status": {"value": "unloaded"}}
