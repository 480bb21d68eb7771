"""Our GGUF tokenizer against transformers' tokenizer loaded from the same file."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tokenizer_samples import MIXED_TEXT

SPECIAL_TEXTS = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <|im_end|> c<|im_start|>",
    "<|im_start|><|im_start|>  <|im_end|>\n\n<repo_name>x<file_sep>",
    "almost special: <|im_sta rt|> <|IM_END|> <im_end> <|endoftext|",
]


def test_encode_matches_transformers_on_mixed_text(smol, hf_smol):
    for line in MIXED_TEXT.splitlines(keepends=True):
        assert smol.encode(line) == hf_smol.encode(line), line
    assert smol.encode(MIXED_TEXT) == hf_smol.encode(MIXED_TEXT)
    assert smol.encode(MIXED_TEXT, add_special_tokens=False) == hf_smol.encode(MIXED_TEXT, add_special_tokens=False)


# Letters, digits, punctuation, spaces/newlines/tabs, CJK, emoji, combining marks and special-token text.
_PIECES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "\r\n", "'s", "'ll", "中文", "🙂", "👩‍👧", "e\u0301",
                     "<|im_start|>", "<|im_end|>", "<|endoftext|>", "123456", "def ", "Hello"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_PIECES, max_size=20))
def test_encode_decode_match_transformers_on_random_text(smol, hf_smol, pieces):
    text = "".join(pieces)
    ids = smol.encode(text)
    assert ids == hf_smol.encode(text)
    # Not always == text: SmolLM2's vocabulary lacks some byte tokens (e.g. 0xF1), which BPE drops.
    assert smol.decode(ids, skip_special_tokens=False) == hf_smol.decode(ids, skip_special_tokens=False)
    assert smol.decode(ids) == hf_smol.decode(ids, skip_special_tokens=True)


def test_encode_decode_match_transformers_on_long_text(smol, hf_smol, tempest_chunk):
    ids = smol.encode(tempest_chunk)
    assert ids == hf_smol.encode(tempest_chunk)
    assert smol.decode(ids) == hf_smol.decode(ids) == tempest_chunk


def test_decode_matches_transformers(smol, hf_smol):
    ids = smol.encode(MIXED_TEXT)
    assert smol.decode(ids) == hf_smol.decode(ids, skip_special_tokens=True) == MIXED_TEXT
    # A cut through a multibyte character, and lone pieces of one: both give U+FFFD the same way.
    for cut in (ids[:5], ids[3:], ids[len(ids) // 2:len(ids) // 2 + 7], [ids[-3]], ids[::2]):
        for skip in (True, False):
            assert smol.decode(cut, skip) == hf_smol.decode(cut, skip_special_tokens=skip)


@pytest.mark.parametrize("text", SPECIAL_TEXTS)
def test_special_tokens_in_text(smol, hf_smol, text):
    ids = smol.encode(text)
    assert ids == hf_smol.encode(text)
    assert smol.decode(ids, skip_special_tokens=False) == hf_smol.decode(ids, skip_special_tokens=False) == text
    assert smol.decode(ids, skip_special_tokens=True) == hf_smol.decode(ids, skip_special_tokens=True)


def test_special_token_recognised_as_one_id(smol):
    assert smol.encode("<|im_start|>") == [1]
    assert smol.encode("x<|im_end|>y") == [smol.token_to_id("x"), 2, smol.token_to_id("y")]
    assert smol.decode([1, 2, 0], skip_special_tokens=True) == ""


def test_bos_policy_matches_transformers(smol, hf_smol):
    # SmolLM2's GGUF says add_bos_token = false: no BOS on encode, as in transformers.
    assert smol.encode("Hi") == hf_smol.encode("Hi", add_special_tokens=True)
    assert smol.encode("Hi") == smol.encode("Hi", add_special_tokens=False)
    assert smol.bos_token_id == hf_smol.bos_token_id == 1
    assert smol.eos_token_id == hf_smol.eos_token_id == 2


def test_vocab_and_token_lookup(smol, hf_smol):
    assert smol.vocab_size == len(hf_smol) == 49152
    vocab = hf_smol.get_vocab()
    for token in ("<|endoftext|>", "<|im_end|>", "Ġthe", "ĊĊ", "!", "Hello"):
        assert smol.token_to_id(token) == vocab[token]
        assert smol.id_to_token(vocab[token]) == token
    assert smol.token_to_id("not-a-token-at-all-xyz") is None


def test_special_token_sets(smol, hf_smol):
    assert smol.special_token_ids == frozenset(range(17))  # the 17 control tokens of the GGUF
    texts = smol.special_token_texts()
    assert texts["<|im_end|>"] == 2 and texts["<|endoftext|>"] == 0 and texts["<|im_start|>"] == 1
    assert set(texts.values()) == smol.special_token_ids


def test_eos_set_smollm2(smol):
    assert smol.eos_token_ids() == frozenset({0, 2})
    assert smol.eos_token_ids([7, 2]) == frozenset({0, 2, 7})


def test_token_bytes_concatenate_to_decode(smol):
    ids = smol.encode(MIXED_TEXT)
    assert b"".join(smol.token_bytes(i) for i in ids).decode("utf-8") == MIXED_TEXT
    assert smol.token_bytes(smol.token_to_id("Ġthe")) == b" the"
    assert smol.token_bytes(2) == b"<|im_end|>"


def test_from_hf_dir_matches_transformers(smol, hf_smol, tmp_path):
    hf_smol.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 5], "bos_token_id": 1}))
    local = Tokenizer.from_hf_dir(tmp_path)
    assert local.encode(MIXED_TEXT) == smol.encode(MIXED_TEXT)
    for text in SPECIAL_TEXTS:
        assert local.encode(text) == hf_smol.encode(text)
    assert local.bos_token_id == 1 and local.eos_token_id == 2
    assert local.eos_token_ids() == frozenset({0, 2, 5})
    chat = [{"role": "user", "content": "Hi"}]
    assert local.apply_chat_template(chat) == hf_smol.apply_chat_template(chat, tokenize=False,
                                                                           add_generation_prompt=True)
    assert local.is_byte_level


def test_from_gguf_rejects_other_tokenizer_models(tmp_path):
    meta = {"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": ["<s>"]}
    with pytest.raises(ValueError, match="'rwkv' is not supported.*gpt2, llama"):
        Tokenizer.from_gguf_metadata(meta)
