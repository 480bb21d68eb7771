"""The name clients send as `model` for a served model (unless --served-model-name says otherwise)."""
from __future__ import annotations

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_served_name(model: str | None, tiny: bool = False) -> str:
    """What clients send as `model` unless --served-model-name says: a named model keeps its name, a
    file its stem; the default model (named, by path, or --tiny) is DEFAULT_MODEL_NAME."""
    from pathlib import Path

    from haltwise.models.catalog import CATALOG, DEFAULT_MODEL, resolve_model

    if tiny or model is None or model == DEFAULT_MODEL:
        return DEFAULT_MODEL_NAME
    if model in CATALOG:
        return model
    path = Path(model)
    try:
        if path.resolve() == Path(resolve_model(None)).resolve():
            return DEFAULT_MODEL_NAME
    except Exception:   # the default model's package is absent: this file is not it
        pass
    return path.name.removesuffix(".gguf") if path.suffix == ".gguf" else path.name
