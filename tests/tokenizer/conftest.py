"""Shared fixtures: the SmolLM2 GGUF, our tokenizer built from it, and transformers' as the oracle."""
from __future__ import annotations

import os

import pytest

from haltwise.tokenizer.tiny import tiny_tokenizer
from haltwise.models.loader import default_model_path
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tokenizer_samples import GGUF_NAME, LONGTEXT


@pytest.fixture(scope="session")
def gguf_path() -> str:
    return str(default_model_path())


@pytest.fixture(scope="session")
def smol(gguf_path: str) -> Tokenizer:
    return Tokenizer.from_gguf(gguf_path)


@pytest.fixture(scope="session")
def hf_smol(gguf_path: str):
    """transformers' tokenizer loaded from the same GGUF (slow: several seconds; loaded once)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=GGUF_NAME)


@pytest.fixture(scope="session")
def tiny() -> Tokenizer:
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tempest_chunk() -> str:
    with open(LONGTEXT, encoding="utf-8") as f:
        text = f.read()
    return text[20000:32000]


@pytest.fixture(scope="session")
def gemma() -> Tokenizer:
    """Our tokenizer of the real Gemma 3 270M GGUF (from the build cache after the first build)."""
    from haltwise.models.catalog import resolve_model

    return Tokenizer.from_gguf(resolve_model("gemma3-270m", progress=None))


@pytest.fixture(scope="session")
def qwen() -> Tokenizer:
    """Our tokenizer of the real Qwen2.5-Coder-0.5B-Instruct GGUF."""
    from haltwise.models.catalog import resolve_model

    return Tokenizer.from_gguf(resolve_model("qwen2.5-coder-0.5b", progress=None))
