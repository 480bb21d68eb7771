"""The model registry: the table of servable models, separate from serving (STYLE §13).

One room owns names, status (unloaded / loading / loaded), memory and eviction; the HTTP surfaces only
ask it for a model by name (registry.acquire) and give the lease back when the response has ended.

    durations.py   keep-alive durations (Ollama's "5m", "-1", 0)
    memory.py      resident memory, returning freed memory to the OS, the load estimate and the budget
    entry.py       one servable model: its status, engine, in-flight count, expiry, per-model caches
    registry.py    ModelRegistry: load on demand (one load per model), LRU + idle + memory eviction
    metrics.py     haltwise_models_* on /metrics
    spec.py        RegistrySpec (what a several-model server is built from) -> its ModelRegistry

Layering: above engine/ (it builds AsyncEngines through a loader it is given), below server/.
"""
