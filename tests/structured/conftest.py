"""Backends over the tiny tokenizer (fast) and SmolLM2's real 49k vocabulary (built once per session)."""
import pytest

from haltwise.structured.llguidance_backend import LLGuidanceBackend
from haltwise.tokenizer.tiny import tiny_tokenizer


@pytest.fixture(scope="session")
def tiny_tok():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_backend(tiny_tok):
    return LLGuidanceBackend(tiny_tok, tiny_tok.vocab_size, tiny_tok.eos_token_ids())


@pytest.fixture(scope="session")
def smol_tok():
    from haltwise.models.loader import default_model_path
    from haltwise.tokenizer.tokenizer import Tokenizer

    return Tokenizer.from_gguf(default_model_path())


@pytest.fixture(scope="session")
def smol_backend(smol_tok):
    return LLGuidanceBackend(smol_tok, smol_tok.vocab_size, smol_tok.eos_token_ids())
