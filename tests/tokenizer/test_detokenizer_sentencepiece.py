"""Streaming decode over SentencePiece pieces (real Gemma 3 vocabulary): ▁ spaces, <0xNN> byte runs.

For any ids and any chunking: increments + flush == decode(all), nothing is ever retracted, and a
delta never ends in a U+FFFD that a later token could still complete.
"""
from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from haltwise.tokenizer.detokenizer import IncrementalDetokenizer
from tests.tokenizer.test_detokenizer import _check_stream

_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_TEXT = "Hello  world ▁ 中文 𓀀𝔘 🫠 e\u0301 \t\n\n  x <start_of_turn>user\nhi<end_of_turn>"


def _pool(tok):
    return sorted(set(tok.encode(_TEXT, add_special_tokens=False)) | set(tok.byte_fallback_ids))


@settings(max_examples=300, **_SETTINGS)
@given(data=st.data(), skip=st.booleans())
def test_gemma_any_ids_any_chunking(gemma, data, skip):
    pool, specials = _pool(gemma), sorted(gemma.special_token_ids)[:50]
    one = st.one_of(st.sampled_from(pool), st.sampled_from(sorted(gemma.byte_fallback_ids)),
                    st.integers(0, gemma.vocab_size - 1), st.sampled_from(specials))
    ids = data.draw(st.lists(one, max_size=40))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=12))
    _check_stream(gemma, ids, cuts, skip)


@settings(max_examples=200, **_SETTINGS)
@given(text=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40))
def test_gemma_token_by_token_never_emits_a_split_character(gemma, text):
    # encode() reads a special token's text ("<unk>", "<eos>", ...) as that token, which decode skips
    assume(not any(special in text for special in gemma.special_token_texts()))
    ids = gemma.encode(text)
    detok = IncrementalDetokenizer(gemma)
    deltas = [detok.step([i]) for i in ids]
    assert "".join(deltas) + detok.flush() == gemma.decode(ids) == text
    assert not any("\ufffd" in d for d in deltas if "\ufffd" not in text)


def test_byte_run_is_held_whole(gemma):
    b = {n: gemma.token_to_id(f"<0x{n:02X}>") for n in (0xE4, 0xB8, 0x96, 0xFF)}
    word = gemma.encode("word", add_special_tokens=False)
    detok = IncrementalDetokenizer(gemma)
    assert [detok.step([b[0xE4]]), detok.step([b[0xB8]]), detok.step([b[0x96]])] == ["", "", ""]
    assert detok.step(word) == "世word"  # E4 B8 96
    # a later invalid byte in the same run makes the whole run U+FFFDs, so nothing was released early
    ids = [b[0xE4], b[0xB8], b[0x96], b[0xFF]]
    detok = IncrementalDetokenizer(gemma)
    assert "".join(detok.step([i]) for i in ids) + detok.flush() == gemma.decode(ids) == "\ufffd" * 4


def test_spaces_are_pieces_not_stripped(gemma):
    ids = gemma.encode("  two  spaces", add_special_tokens=False)
    detok = IncrementalDetokenizer(gemma)
    assert "".join(detok.step([i]) for i in ids) + detok.flush() == "  two  spaces"
