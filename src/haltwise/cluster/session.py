"""The Ray connection and the Serve app of one `haltwise serve --replicas` run: start (or join) a Ray cluster,
deploy N EngineReplicas, and hand back the RemoteEngine the app serves (launch.py decides what to deploy).

    ClusterSession.open(address=None)   a new local Ray cluster, loopback only (127.0.0.1)
    ClusterSession.open(address="H:P")  join a running cluster (`ray start --head` on H)
    session.deploy(...) -> RemoteEngine ... session.close()   (deletes the app; stops a local cluster)

Serve settings, and why:
  num_replicas fixed           no autoscaling (replica counts oscillate under bursty LLM load)
  max_ongoing_requests         max_num_seqs + max_queue: the engine's own admission (503) decides
  max_queued_requests          --max-queue at the handle; beyond it Serve raises BackPressureError (503)
  graceful_shutdown_timeout_s  >= the longest request deadline (in-flight streams finish on stop)
  request_timeout_s            not set: Serve's timeout would cut long streams
  no HTTP proxy                the haltwise app is the ingress; Serve only routes to replicas
  authentication               cluster/auth.py: token auth unless RAY_AUTH_MODE=disabled on a loopback-only
                               cluster; stated at start; the token file 0600
  OMP_NUM_THREADS / threads    --replica-cpus each: Ray would otherwise set OMP_NUM_THREADS to the
                               replica's CPU count, and the engine keeps one torch thread team
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from haltwise.cluster import auth as cluster_auth
from haltwise.config import EngineConfig

log = logging.getLogger("haltwise.cluster")
APP_NAME = "haltwise"
DEPLOYMENT = "EngineReplica"
STATS_PERIOD_S = 0.5
ROUTER_CLASS = "haltwise.cluster.router.PrefixAwareRouter"  # by import path: Serve imports it


def pin_loopback() -> None:
    """Make Ray's node address 127.0.0.1. Ray replaces 127.0.0.1 given as the node IP by the host's
    routable address unless multi-node support is off, which is this switch (read at call time)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray._private.ray_constants as ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def ingress_tokenizer(model: str | None, tiny: bool) -> Any:
    """The tokenizer the ingress validates and encodes with (the model file must be on this machine too)."""
    if tiny:
        from haltwise.tokenizer.tiny import tiny_tokenizer

        return tiny_tokenizer()
    from haltwise.models.loader import default_model_path
    from haltwise.tokenizer.tokenizer import Tokenizer

    path = Path(model) if model else default_model_path()
    return Tokenizer.from_hf_dir(path) if path.is_dir() else Tokenizer.from_gguf(path)


class ClusterSession:
    """The Ray connection and the Serve app of one `haltwise serve --replicas` run."""

    def __init__(self, local: bool):
        self.local = local

    @classmethod
    def open(cls, address: str | None = None, num_cpus: float | None = None) -> "ClusterSession":
        """Raises cluster.auth.ClusterAuthError (before Ray starts) for refused authentication settings."""
        auth = cluster_auth.resolve_auth(address)
        cluster_auth.apply(auth, local=address is None)
        import ray

        started = time.monotonic()
        if address is None:
            pin_loopback()
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, namespace=APP_NAME,
                     logging_level=logging.WARNING, log_to_driver=True)
        else:
            ray.init(address=address, namespace=APP_NAME, logging_level=logging.WARNING, log_to_driver=True)
        log.info("ray %s in %.1fs", "started on 127.0.0.1" if address is None else f"joined at {address}",
                 time.monotonic() - started)
        if auth.token_path is not None:   # Ray may have written it (with the umask's mode)
            cluster_auth.secure_token_file(auth.token_path, create=False)
        return cls(local=address is None)

    def deploy(self, build: dict[str, Any], replicas: int, replica_cpus: float, max_queue: int,
               graceful_shutdown_s: float) -> Any:
        """Deploy `replicas` EngineReplicas built from `build` (AsyncEngine.build kwargs); their RemoteEngine."""
        from haltwise.cluster.client import RemoteEngine
        from haltwise.cluster.replica import EngineReplica

        threads = max(1, math.floor(replica_cpus))
        config: EngineConfig = replace(build.get("engine_config") or EngineConfig(), num_threads=threads)
        build = {**build, "engine_config": config}
        handle = self.run(EngineReplica, build, replicas, replica_cpus, max_queue, graceful_shutdown_s,
                          max_ongoing=config.max_num_seqs + config.max_queue, router=ROUTER_CLASS,
                          router_kwargs={"block_size": config.block_size})
        info = handle.info.remote().result()
        return RemoteEngine(handle, ingress_tokenizer(build.get("model"), build.get("tiny", False)), info, DEPLOYMENT)

    def run(self, body: type, build: dict[str, Any], replicas: int, replica_cpus: float, max_queue: int,
            graceful_shutdown_s: float, max_ongoing: int, router: str, router_kwargs: dict[str, Any]) -> Any:
        """Run `replicas` copies of the deployment class `body(build)` behind `router`; the app's handle."""
        from ray import serve
        from ray.serve.config import RequestRouterConfig
        from ray.serve.schema import LoggingConfig

        threads = max(1, math.floor(replica_cpus))
        quiet = LoggingConfig(log_level="WARNING", enable_access_log=False)
        serve.start(proxy_location="Disabled", logging_config=quiet)
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        deployment = serve.deployment(body, name=DEPLOYMENT).options(
            num_replicas=replicas, max_ongoing_requests=max_ongoing, max_queued_requests=max_queue,
            ray_actor_options={"num_cpus": replica_cpus, "runtime_env": {"env_vars": env}},
            health_check_period_s=2.0, health_check_timeout_s=10.0,
            graceful_shutdown_timeout_s=graceful_shutdown_s, graceful_shutdown_wait_loop_s=0.5,
            logging_config=quiet,
            request_router_config=RequestRouterConfig(
                request_router_class=router, request_router_kwargs=router_kwargs,
                request_routing_stats_period_s=STATS_PERIOD_S, request_routing_stats_timeout_s=5.0))
        started = time.monotonic()
        handle = serve.run(deployment.bind(build), name=APP_NAME, route_prefix=None)
        log.info("%d replicas ready in %.1fs", replicas, time.monotonic() - started)
        return handle

    def close(self) -> None:
        """Delete the app; stop the local cluster (a joined cluster keeps running)."""
        import ray
        from ray import serve

        try:
            if self.local:
                serve.shutdown()
            else:
                serve.delete(APP_NAME)
        finally:
            ray.shutdown()
