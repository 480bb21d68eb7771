"""Tokenizers built from the real Gemma 3 and Qwen2.5 GGUFs equal transformers' (stored oracle + one live run).

The fixtures (fixtures/<family>.json, written by make_oracle_fixtures.py) hold transformers' ids and
decodes for ~7k characters of mixed text per family; the slow tests rebuild transformers' tokenizer
and compare it with ours live, on the same texts and on random ones.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from haltwise.models.catalog import CATALOG, resolve_model
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.make_oracle_fixtures import FAMILIES, FIXTURES, hf_tokenizer, oracle_record

FAMILY_NAMES = sorted(FAMILIES)


def fixture(family: str) -> dict:
    return json.loads((FIXTURES / f"{family}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def ours(gemma, qwen) -> dict[str, Tokenizer]:
    """Our tokenizer per family (conftest builds each once per session)."""
    return {"gemma3": gemma, "qwen2": qwen}


class _AsOracle:
    """Our Tokenizer with the three methods oracle_record calls, spelled as transformers spells them."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok

    def encode(self, text, add_special_tokens=True):
        return self.tok.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=True):
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def __len__(self):
        return self.tok.vocab_size


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_fixture_is_for_the_catalog_file(family):
    data = fixture(family)
    assert data["gguf_sha256"] == CATALOG[data["model"]].sha256
    assert sum(len(e["text"]) for e in data["encodes"]) > 4000


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_encode_equals_transformers(ours, family):
    tok = ours[family]
    for e in fixture(family)["encodes"]:
        assert tok.encode(e["text"]) == e["ids"], e["name"]
        assert tok.encode(e["text"], add_special_tokens=False) == e["ids_no_special"], e["name"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_decode_equals_transformers(ours, family):
    tok = ours[family]
    data = fixture(family)
    for e in data["encodes"]:
        assert tok.decode(e["ids"]) == e["decode"], e["name"]
        assert tok.decode(e["ids"], skip_special_tokens=False) == e["decode_keep_special"], e["name"]
    for d in data["decodes"]:  # cut and random id lists: split byte-fallback runs, lone special tokens
        assert tok.decode(d["ids"]) == d["skip"], d["ids"]
        assert tok.decode(d["ids"], skip_special_tokens=False) == d["keep"], d["ids"]


def test_gemma_specifics(ours):
    tok = ours["gemma3"]
    assert tok.encode("Hello") == [2, tok.token_to_id("Hello")]  # BOS, and no prefix space
    assert tok.bos_token_id == 2 and tok.eos_token_id == 1
    assert tok.token_to_id("\u2581\u2581") == 138  # a run of two spaces, stored as "  " in the file
    ids = tok.encode("𓀀", add_special_tokens=False)  # not in the vocabulary: four <0xNN> byte pieces
    assert [tok.id_to_token(i) for i in ids] == ["<0xF0>", "<0x93>", "<0x80>", "<0x80>"]
    assert tok.decode(ids) == "𓀀"
    assert not tok.is_byte_level


def test_qwen_specifics(ours):
    tok = ours["qwen2"]
    assert tok.encode("<|im_start|>user") == [151644, 872]  # no BOS; the control token kept whole
    assert tok.encode("12345") == [16, 17, 18, 19, 20]  # qwen2 split: one digit per piece
    assert tok.decode(tok.encode("<tool_call>x</tool_call>")) == "<tool_call>x</tool_call>"  # user-defined: kept
    assert tok.is_byte_level


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_live_transformers_equals_ours(ours, family):
    """One live oracle run per family: the whole fixture recomputed, then random text."""
    data = fixture(family)
    hf = hf_tokenizer(resolve_model(data["model"], progress=None))
    texts = {e["name"]: e["text"] for e in data["encodes"]}
    assert oracle_record(_AsOracle(ours[family]), texts) == oracle_record(hf, texts)

    pieces = st.one_of(
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10),
        st.sampled_from([" ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "中文", "🙂", "👩‍👧", "e\u0301", "𓀀", "def ",
                         "<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>", "<tool_call>", "12345"]))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(parts=st.lists(pieces, max_size=16))
    def check(parts):
        text = "".join(parts)
        ids = ours[family].encode(text)
        assert ids == hf.encode(text)
        assert ours[family].decode(ids) == hf.decode(ids, skip_special_tokens=True)
        assert ours[family].decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)

    check()

    if family == "qwen2":  # the chat template through transformers' own apply_chat_template
        from tests.tokenizer.test_chat_template import QWEN_TWO_TURNS, TOOL_CALL_TURNS, TOOLS

        for messages, kw in ((QWEN_TWO_TURNS, {}), (TOOL_CALL_TURNS, {"tools": TOOLS})):
            text = ours[family].apply_chat_template(messages, **kw)
            assert text == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
            assert ours[family].encode(text, add_special_tokens=False) == list(
                hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False, **kw))


def test_eos_sets(ours):
    """SPEC §2: the tokenizer's eos plus the vocabulary's end-of-generation control tokens."""
    gemma, qwen = ours["gemma3"], ours["qwen2"]
    assert gemma.eos_token_ids() == {gemma.token_to_id("<eos>"), gemma.token_to_id("<end_of_turn>")} == {1, 106}
    assert qwen.eos_token_ids() == {qwen.token_to_id("<|im_end|>"), qwen.token_to_id("<|endoftext|>")} \
        == {151645, 151643}
    assert qwen.eos_token_id == 151645
