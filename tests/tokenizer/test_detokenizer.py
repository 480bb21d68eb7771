"""Incremental detokenizer: for any ids and any chunking, increments + flush == decode(all)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import SentencePieceBPETokenizer

from haltwise.tokenizer.detokenizer import IncrementalDetokenizer
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.tokenizer_samples import MIXED_TEXT

_FIXTURES = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _split_multibyte_pool(tok: Tokenizer) -> list[int]:
    """Ids whose bytes are not valid UTF-8 on their own (pieces of CJK / emoji / accented chars)."""
    ids = tok.encode("中文分词，我们今天 🙂🚀👩‍👩‍👧‍👦 café ñ € Привет ∑√ 日本語", add_special_tokens=False)
    pieces = [i for i in range(tok.vocab_size) if _is_partial(tok.token_bytes(i))][:200]
    return sorted(set(ids + pieces))


def _is_partial(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _id_sequences(tok: Tokenizer):
    pool = _split_multibyte_pool(tok)
    specials = sorted(tok.special_token_ids)
    one_id = st.one_of(st.integers(0, tok.vocab_size - 1), st.sampled_from(pool), st.sampled_from(specials))
    return st.lists(one_id, max_size=40)


def _chunked(ids: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in zip(points, points[1:])] + [[]]  # an empty step too


def _check_stream(tok: Tokenizer, ids: list[int], cuts: list[int], skip: bool) -> None:
    full = tok.decode(ids, skip_special_tokens=skip)
    detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    emitted, seen = "", []
    for chunk in _chunked(ids, cuts):
        emitted += detok.step(chunk)
        seen += chunk
        # Never retracted: what is out so far is a prefix of the final text ...
        assert full.startswith(emitted)
        if tok.is_byte_level:
            # ... and only the bytes of an unfinished character are held: at most 3 bytes, which
            # decode on their own to U+FFFD only (one, or more when they can never complete, e.g.
            # ED A1: a surrogate that the incremental UTF-8 decoder rejects one byte late).
            so_far = tok.decode(seen, skip_special_tokens=skip)
            held = so_far[len(emitted):]
            assert so_far.startswith(emitted) and len(held) <= 3 and set(held) <= {"\ufffd"}
    assert emitted + detok.flush() == full


@settings(max_examples=300, **_FIXTURES)
@given(data=st.data(), skip=st.booleans())
def test_smollm2_any_ids_any_chunking(smol, data, skip):
    ids = data.draw(_id_sequences(smol))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=12))
    _check_stream(smol, ids, cuts, skip)


@settings(max_examples=300, **_FIXTURES)
@given(data=st.data(), skip=st.booleans())
def test_tiny_any_ids_any_chunking(tiny, data, skip):
    ids = data.draw(_id_sequences(tiny))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=12))
    _check_stream(tiny, ids, cuts, skip)


def test_token_by_token_on_real_text(smol):
    ids = smol.encode("<|im_start|>assistant\n" + MIXED_TEXT + "<|im_end|>")
    detok = IncrementalDetokenizer(smol)
    pieces = [detok.step([i]) for i in ids]
    assert "".join(pieces) + detok.flush() == "assistant\n" + MIXED_TEXT
    assert not any("\ufffd" in p for p in pieces)
    assert any(p == "" for p in pieces)  # some tokens end mid-character (emoji, CJK) and are held


def test_split_character_is_held_until_complete(smol):
    raw = [smol.token_to_id(c) for c in ("ä", "¸", "Ń")]  # one token per byte: e4, b8, ad
    detok = IncrementalDetokenizer(smol)
    assert [detok.step([i]) for i in raw] == ["", "", "中"]
    assert detok.flush() == ""


def test_flush_gives_replacement_for_unfinished_character(smol):
    detok = IncrementalDetokenizer(smol)
    e4, b8 = smol.token_to_id("ä"), smol.token_to_id("¸")
    assert detok.step([smol.token_to_id("a"), e4, b8]) == "a"
    assert detok.flush() == "\ufffd" == smol.decode([e4, b8])


def test_special_tokens_skipped_or_kept(smol):
    ids = smol.encode("Hi<|im_end|>")
    assert IncrementalDetokenizer(smol).step(ids) == "Hi"
    assert IncrementalDetokenizer(smol, skip_special_tokens=False).step(ids) == "Hi<|im_end|>"


def test_kept_special_tokens_show_while_others_are_skipped(smol):
    """A tool request's call markers (toolcalls/formats/base.py marker_texts) stay in the text."""
    ids = smol.encode("<|im_start|>Hi<|im_end|>")
    keep = frozenset({smol.token_to_id("<|im_start|>")})
    assert IncrementalDetokenizer(smol, keep=keep).step(ids) == "<|im_start|>Hi"
    assert IncrementalDetokenizer(smol, skip_special_tokens=False, keep=keep).step(ids) == "<|im_start|>Hi<|im_end|>"


@pytest.fixture(scope="module")
def metaspace() -> Tokenizer:
    """A SentencePiece-style (Metaspace, not byte-level) BPE trained in-process: the prefix-offset path."""
    sp = SentencePieceBPETokenizer()
    sp.train_from_iterator(MIXED_TEXT.splitlines() * 3, vocab_size=300, min_frequency=1,
                           special_tokens=["<unk>", "</s>"], show_progress=False)
    backend = sp._tokenizer
    tok = Tokenizer(backend, bos_token=None, eos_token="</s>")
    assert not tok.is_byte_level
    return tok


@settings(max_examples=200, **_FIXTURES)
@given(data=st.data(), skip=st.booleans())
def test_prefix_offset_path_any_ids_any_chunking(metaspace, data, skip):
    one_id = st.integers(0, metaspace.vocab_size - 1)
    ids = data.draw(st.lists(one_id, max_size=30))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=10))
    _check_stream(metaspace, ids, cuts, skip)
