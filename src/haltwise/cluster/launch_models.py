"""Deploy N ModelsReplicas (several models: `haltwise serve --models-dir DIR --replicas N`) and hand back the
RemoteModels the app serves in place of its ModelRegistry.

Serve settings beyond launch.py's:
  router                 ModelAwareRouter: a replica that has the model loaded first (model_router.py)
  max_ongoing_requests   --models-max x (max_num_seqs + max_queue) + LOAD_CALLS: every loaded model's own
                         admission decides (503), plus room for load/unload calls
  preload                the --model names load once, on one replica each (the ingress's load call), not on
                         every replica
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from haltwise.cluster.session import DEPLOYMENT, ClusterSession

MODEL_ROUTER_CLASS = "haltwise.cluster.model_router.ModelAwareRouter"   # by import path: Serve imports it
LOAD_CALLS = 4


def deploy_models(session: ClusterSession, args: Any, replicas: int, graceful_shutdown_s: float) -> Any:
    """args: `haltwise serve`'s, with models_spec (serve_models.spec_from) and prompt_cache set."""
    import math

    from haltwise.cluster.client import RemoteEngine
    from haltwise.cluster.models_replica import ModelsReplica
    from haltwise.cluster.remote_models import RemoteModels

    spec = args.models_spec
    config = replace(spec.config, num_threads=max(1, math.floor(args.replica_cpus)))
    spec = replace(spec, config=config)
    build = {"spec": spec, "prompt_cache": getattr(args, "prompt_cache", None), "replicas": replicas,
             "replica_cpus": args.replica_cpus}
    handle = session.run(ModelsReplica, build, replicas, args.replica_cpus, args.max_queue, graceful_shutdown_s,
                         max_ongoing=spec.models_max * (config.max_num_seqs + config.max_queue) + LOAD_CALLS,
                         router=MODEL_ROUTER_CLASS, router_kwargs={})
    info = handle.info.remote().result()
    remote = RemoteEngine(handle, None, info, DEPLOYMENT)
    return RemoteModels(remote, handle, list(spec.table), list(spec.preload), spec.chat_template)
