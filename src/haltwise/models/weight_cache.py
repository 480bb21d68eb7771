"""A local cache of dequantized GGUF weights, so the second load is a file read, not a dequantization.

Key: the GGUF's resolved path, size and mtime, the weight dtype and a format version; a changed file
gets a new key. Location: $HALTWISE_CACHE_DIR (default ~/.cache/haltwise); HALTWISE_WEIGHT_CACHE=0
turns it off. Writes are atomic (temp file + rename); a cache that cannot be written is only logged.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from safetensors.torch import load_model, save_model
from torch import nn

log = logging.getLogger("haltwise.models")
FORMAT_VERSION = 2  # 2: families beyond llama (issue 14)


def cache_file(source: Path, dtype: str) -> Path | None:
    if os.environ.get("HALTWISE_WEIGHT_CACHE", "1") == "0":
        return None
    st = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{st.st_size}|{st.st_mtime_ns}|{dtype}|{FORMAT_VERSION}".encode())
    root = Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise"))
    return root / f"{source.stem}-{dtype}-{key.hexdigest()[:16]}.safetensors"


def try_load(model: nn.Module, path: Path | None) -> bool:
    """Fill `model` from the cache; False (model untouched or to be overwritten) on a miss or a bad file."""
    if path is None or not path.is_file():
        return False
    try:
        load_model(model, str(path), strict=True)
        return True
    except Exception as e:  # a truncated or stale file is rebuilt, never trusted
        log.warning("ignoring weight cache %s: %s", path, e)
        return False


def store(model: nn.Module, path: Path | None) -> None:
    if path is None:
        return
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_model(model, str(tmp))
        os.replace(tmp, path)
    except OSError as e:
        log.warning("could not write weight cache %s: %s", path, e)
        tmp.unlink(missing_ok=True)
