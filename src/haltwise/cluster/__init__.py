"""Scale-out on Ray Serve: N engine replicas behind the one OpenAI app (`haltwise serve --replicas N`).

    HTTP client ──> FastAPI app (ingress process, the same app as `haltwise serve`)
                      │  RemoteEngine: the AsyncEngine interface the app uses
                      │  DeploymentHandle (streaming) ── PrefixAwareRouter picks the replica
                      ▼
                 EngineReplica × N (Ray actors; each owns one AsyncEngine on its own torch thread)

Only this package imports ray, and only `haltwise serve --replicas/--ray-address` imports this package.
  prefix.py   the prompt's KV block hash chain (the allocator's hashes)
  wire.py     what crosses the boundary: stream items and errors
  replica.py  the EngineReplica deployment
  router.py   the request router: prefix affinity, else power of two choices
  client.py   RemoteEngine, the ingress side
  metrics.py  per-replica Prometheus metrics (`replica` label)
  auth.py     Ray's authentication: token unless disabled on a loopback-only cluster; token file 0600
  session.py  a loopback Ray cluster or an existing one; deploy a Serve app behind a router
  launch.py   the `serve` entry point: one model's EngineReplicas, or several models' ModelsReplicas
Several models (`--models-dir DIR --replicas N`): every replica runs a registry over the same models.
  models_replica.py  the ModelsReplica deployment (a ModelRegistry; the host's memory budget split)
  model_router.py    the request router: a replica that has the model loaded, else the roomiest one
  remote_models.py   RemoteModels, the registry interface the app uses at the ingress (merged /v1/models)
  launch_models.py   deploy ModelsReplicas behind ModelAwareRouter
"""
