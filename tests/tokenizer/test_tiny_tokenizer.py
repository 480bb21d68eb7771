"""The tiny tokenizer used by fast engine/server tests."""
from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.tokenizer.tiny import TINY_VOCAB_SIZE, tiny_tokenizer
from tests.tokenizer.tokenizer_samples import MIXED_TEXT


def test_layout(tiny):
    assert tiny.vocab_size == TINY_VOCAB_SIZE
    assert [tiny.id_to_token(i) for i in range(3)] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tiny.special_token_ids == frozenset({0, 1, 2})
    assert tiny.eos_token_ids() == frozenset({0, 2})
    assert tiny.eos_token_id == 2 and tiny.bos_token_id == 1
    assert tiny.is_byte_level
    assert sorted(tiny.token_bytes(i) for i in range(3, 259)) == [bytes([b]) for b in range(256)]
    assert len(tiny.encode("The quick brown fox")) < len("The quick brown fox")  # merges were learned


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60))
def test_round_trip_any_text(text):
    tok = tiny_tokenizer()
    ids = tok.encode(text)
    assert all(0 <= i < TINY_VOCAB_SIZE for i in ids)
    assert tok.decode(ids, skip_special_tokens=False) == text  # all 256 bytes are in the vocabulary


def test_special_tokens_and_chat(tiny):
    text = tiny.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tiny.encode(text, add_special_tokens=False)
    assert ids[0] == 1 and ids.count(2) == 1 and ids.count(1) == 2
    assert tiny.decode(ids) == "user\nHi\nassistant\n"
    assert tiny.encode(MIXED_TEXT) == tiny.encode(MIXED_TEXT, add_special_tokens=False)


def test_deterministic_across_processes(tiny):
    code = ("from haltwise.tokenizer.tiny import tiny_tokenizer; import hashlib; "
            "print(hashlib.sha256(tiny_tokenizer()._tk.to_str().encode()).hexdigest())")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(runs) == 1
    assert tiny_tokenizer().encode(MIXED_TEXT) == tiny.encode(MIXED_TEXT)
