"""One local Ray cluster (127.0.0.1 only) with two tiny-model replicas behind the app, per test module.

The cluster is small on purpose (2 logical CPUs, half a CPU per replica): CI machines here have 2 cores.
RAY_AUTH_MODE=disabled: the cluster is loopback-only and lives for the test (see the README for what a
real deployment sets instead). Teardown always stops Serve and Ray.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Iterator

import pytest

from haltwise.config import EngineConfig
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread

# Small admission limits so that a burst of a few dozen requests overloads the cluster; a long
# window so that one stream can outlive a few /cluster polls.
CONFIG = EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=1024, max_num_seqs=4, max_queue=4)
HANDLE_QUEUE = 4          # Serve's max_queued_requests: beyond it, BackPressureError
REPLICA_CPUS = 0.5


@dataclass
class Cluster:
    url: str
    engine: Any


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    pytest.importorskip("ray.serve", reason="the cluster extra is not installed (pip install -e '.[cluster]')")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from haltwise.cluster.session import ClusterSession

    session = ClusterSession.open(None, num_cpus=2)
    try:
        engine = session.deploy({"tiny": True, "engine_config": CONFIG}, replicas=2, replica_cpus=REPLICA_CPUS,
                                max_queue=HANDLE_QUEUE, graceful_shutdown_s=5.0)
        with ServerThread(build_app(engine, "tiny", shutdown_grace=2.0)) as server:
            yield Cluster(server.url, engine)
    finally:
        session.close()


@pytest.fixture(scope="module")
def single() -> Iterator[ServerThread]:
    """The in-process server with the same model and engine config, for comparisons."""
    from haltwise.engine.async_engine import AsyncEngine

    engine = AsyncEngine.build(engine_config=replace(CONFIG, num_threads=1), tiny=True)  # as each replica
    with ServerThread(build_app(engine, "tiny")) as server:
        yield server
