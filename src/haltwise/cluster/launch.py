"""`haltwise serve --replicas N [--ray-address A]`: open a ClusterSession (cluster/session.py), deploy one model's
EngineReplicas or, with several models, ModelsReplicas (cluster/launch_models.py), serve, and close the session.
"""
from __future__ import annotations

import logging
import math
import os
import sys
from typing import Any

from haltwise.cluster import auth as cluster_auth
from haltwise.cluster.session import ClusterSession

log = logging.getLogger("haltwise.cluster")


def serve_cluster(args: Any, serve: Any, several: bool = False) -> int:
    """`haltwise serve --replicas N [--ray-address A]`: run `serve(args, engine)` on a RemoteEngine, or with
    several models (--models-dir / several --model) `serve(args, None, models)` on RemoteModels."""
    from haltwise.tools.model_args import engine_config_from

    replicas = args.replicas or 1
    deadline = max(args.shutdown_grace, args.default_timeout or 0.0)
    num_cpus = None
    if args.ray_address is None:  # a local cluster: room for every replica asked for, even beyond the cores
        cores = os.cpu_count() or 1
        num_cpus = max(cores, math.ceil(replicas * args.replica_cpus))
        if num_cpus > cores:
            log.warning("%d replicas x %g CPUs exceed this machine's %d cores: they will share them",
                        replicas, args.replica_cpus, cores)
    try:
        session = ClusterSession.open(args.ray_address, num_cpus=num_cpus)
    except cluster_auth.ClusterAuthError as e:
        print(f"haltwise serve: error: {e}", file=sys.stderr, flush=True)
        return 2
    try:
        if several:
            from haltwise.cluster.launch_models import deploy_models

            models = deploy_models(session, args, replicas, graceful_shutdown_s=deadline + 5)
            return serve(args, None, models)
        build = {"model": args.model, "engine_config": engine_config_from(args), "rope_scaling": args.rope_scaling,
                 "default_timeout": args.default_timeout, "tiny": args.tiny, "watchdog_s": args.watchdog,
                 "prompt_cache": getattr(args, "prompt_cache", None)}
        engine = session.deploy(build, replicas, args.replica_cpus, args.max_queue, graceful_shutdown_s=deadline + 5)
        return serve(args, engine)
    finally:
        session.close()
