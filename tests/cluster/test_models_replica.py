"""How a host's memory budget is split between the several-model replicas that share it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.serve", reason="the cluster extra is not installed")

from haltwise.cluster.models_replica import replica_share  # noqa: E402
from haltwise.config import EngineConfig  # noqa: E402
from haltwise.registry.spec import RegistrySpec  # noqa: E402

GiB = 1 << 30
SPEC = RegistrySpec(table=(("a", Path("a.gguf")),), preload=(), config=EngineConfig(), rope_scaling=None,
                    default_timeout=None, watchdog_s=30.0, chat_template=None, models_max=4, keep_alive_s=300.0,
                    models_memory=None, memory_reserve=GiB // 2)


def test_replicas_on_one_host_split_its_budget(monkeypatch) -> None:
    monkeypatch.setattr("haltwise.engine.kv_cache.available_ram", lambda: 10 * GiB)
    tiers = SimpleNamespace(budget_bytes=GiB // 4)                  # each replica's prompt-cache RAM tier
    assert replica_share(SPEC, tiers, 1) is None                    # alone: the one-process rule, live
    assert replica_share(SPEC, tiers, 2) == (10 * GiB - GiB // 2 - 2 * (GiB // 4)) // 2
    assert replica_share(SPEC, None, 4) == (10 * GiB - GiB // 2) // 4
    assert replica_share(replace(SPEC, models_memory=6 * GiB), tiers, 3) == 2 * GiB   # --models-memory per host
    assert replica_share(replace(SPEC, models_memory=6 * GiB), tiers, 1) == 6 * GiB
