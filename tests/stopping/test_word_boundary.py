"""Whole-word stop matching (stop_boundary "word"): the matcher and the stopper against a regex reference."""
import re

import pytest
from hypothesis import given, settings, strategies as st

from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.stop_strings import StopStringMatcher, is_word_char
from haltwise.stopping.termination import Reason

EOS = frozenset({2})
ALPHABET = "aE_1 .\né字"          # word chars (incl. non-ASCII) and non-word chars
texts = st.text(alphabet=ALPHABET, max_size=50)
stop_sets = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=5)


def chunk(text, cuts):
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


def pattern(stop):
    """The whole-word rule as a regex: (?<!\\w) / (?!\\w) on the sides that start/end with a word char."""
    left = r"(?<!\w)" if re.match(r"\w", stop[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", stop[-1]) else ""
    return left + re.escape(stop) + right


def regex_matches(text, stops):
    """Every (overlapping) whole-word occurrence in the final text; the text's end is a boundary."""
    return {(m.start(), m.start() + len(s), s) for s in set(stops) for m in re.finditer(f"(?={pattern(s)})", text)}


def test_is_word_char_is_re_w():
    for ch in ALPHABET + "-ß٣\u00a0\t'":
        assert is_word_char(ch) == bool(re.match(r"\w", ch)), ch


@settings(max_examples=400, deadline=None)
@given(texts, stop_sets, st.lists(st.integers(0, 50), max_size=15))
def test_matcher_equals_regex_for_any_chunking(text, stops, cuts):
    m = StopStringMatcher(stops, "word")
    found, fed = [], ""
    for piece in chunk(text, cuts):
        new = m.feed(piece)
        fed += piece
        assert [x.end for x in new] == sorted(x.end for x in new)
        # decided matches only: one whose last char is a word char was followed by a fed char
        assert all(x.end < len(fed) or not is_word_char(x.stop[-1]) for x in new)
        found += new
        # holdback covers every match still waiting at the end and every prefix of a stop
        waiting = [s for (a, b, s) in regex_matches(fed, stops) if b == len(fed) and is_word_char(s[-1])]
        starts = [len(fed) - len(s) for s in waiting]
        prefix_hold = max((k for k in range(1, len(fed) + 1) for s in stops
                           if k < len(s) and s.startswith(fed[len(fed) - k:])), default=0)
        assert m.pending() == max([prefix_hold] + [len(fed) - a for a in starts])
    found += m.flush()
    assert m.flush() == []
    assert {(x.start, x.end, x.stop) for x in found} == regex_matches(text, stops)


def test_prefix_mode_is_unchanged():
    assert [x.start for x in StopStringMatcher(["END"]).feed("ENDING")] == [0]
    assert StopStringMatcher(["END"], "word").feed("ENDING") == []


def test_word_examples():
    m = StopStringMatcher(["END", "Q:", "\n\n"], "word")
    assert m.feed("BACKEND, ENDING, FAQ: x") == []
    got = m.feed(" Q: THE END")
    assert [x.stop for x in got] == ["Q:"]           # "END" waits for its right side
    assert m.pending() == 3
    assert [(x.start, x.stop) for x in m.feed(".")] == [(31, "END")]
    assert m.pending() == 0
    with pytest.raises(ValueError):
        StopStringMatcher(["x"], "words")


# ---- through the stopper -------------------------------------------------------------------
def make(max_tokens=100, **kw):
    return SequenceStopper(SamplingParams(max_tokens=max_tokens, stop_boundary="word", **kw), EOS, {},
                           num_prompt_tokens=5, max_total_tokens=1000)


def run(stopper, pieces, end_with_eos=False):
    """Feed pieces as tokens 10, 11, ...; returns (termination, streamed text, final text)."""
    streamed, term = "", None
    tokens = [(10 + i, p) for i, p in enumerate(pieces)] + ([(2, "")] if end_with_eos else [])
    for tid, piece in tokens:
        term = stopper.on_token(tid, piece)
        streamed += stopper.release()
        if term is not None:
            break
    if term is None:
        term = stopper.terminate(Reason.CANCELLED)
    streamed += stopper.finish(term)
    return term, streamed, stopper.text


WORDS = st.text(alphabet="aE字_1", min_size=1, max_size=3)


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=3), st.booleans(), texts,
       st.lists(st.integers(0, 50), max_size=15), st.lists(st.integers(0, 50), max_size=15),
       st.booleans(), st.booleans())
def test_stopper_cut_equals_regex_for_any_chunking(words, blank_line, text, cuts_a, cuts_b, include, eos):
    """Word stops (plus "\\n\\n"): the cut is the earliest whole-word occurrence in the final text, whatever
    the chunking, however generation ends (eos or max_tokens on the last token); streaming == final."""
    stops = words + (["\n\n"] if blank_line else [])
    found = sorted(regex_matches(text, stops))
    expected = text if not found else text[:found[0][1] if include else found[0][0]]
    for cuts in (cuts_a, cuts_b):
        pieces = chunk(text, cuts) or [""]
        s = make(max_tokens=len(pieces) + (1 if eos else 0), stop=stops, include_stop_str_in_output=include)
        term, streamed, final = run(s, pieces, end_with_eos=eos)
        assert final == expected and streamed == expected
        assert (term.reason is Reason.STOP_STRING) == bool(found)
        if found:
            assert term.stop_reason == found[0][2] and term.char_offset == len(expected)


def test_end_not_cut_inside_ending_but_at_a_boundary():
    term, streamed, final = run(make(stop=["END"]), ["The ", "END", "ING is ", "near. THE", " END", "."])
    assert final == "The ENDING is near. THE " and term.reason is Reason.STOP_STRING and term.token_index == 5


def test_waiting_match_is_held_back_in_the_stream():
    s = make(stop=["END"])
    s.on_token(10, "THE END")
    assert s.release() == "THE "
    s.on_token(11, "S")                 # "ENDS": not a stop after all, released
    assert s.release() == "ENDS" and s.text == "THE ENDS"


def test_waiting_match_at_the_end_counts_when_eos_or_a_limit_ends_the_text():
    term, _, final = run(make(stop=["END"]), ["THE", " END"], end_with_eos=True)
    assert final == "THE " and term.reason is Reason.STOP_STRING and term.finish_reason == "stop"
    term, _, final = run(make(max_tokens=2, stop=["END"]), ["THE", " END"])
    assert final == "THE " and term.reason is Reason.STOP_STRING        # wins over max_tokens
    term, _, final = run(make(max_tokens=2, stop=["END"]), ["THE", " ENDI"])
    assert final == "THE ENDI" and term.reason is Reason.MAX_TOKENS


def test_an_end_decided_outside_moves_the_cut_but_keeps_its_reason():
    s = make(stop=["END"])
    s.on_token(10, "THE END")
    term = s.terminate(Reason.TIMEOUT, "deadline")
    assert term.reason is Reason.TIMEOUT and term.char_offset == 4
    assert s.finish(term) == "THE " and s.text == "THE "


def test_min_tokens_applies_at_the_token_that_decides_the_match():
    # "END" completes on token 0 but is decided by token 1's ".", which is still below min_tokens=3
    term, _, final = run(make(stop=["END"], min_tokens=3), ["END", ". ", "x END", " y"])
    assert final == "END. x " and term.token_index == 3


def test_stop_boundary_is_validated():
    with pytest.raises(ParamError) as e:
        SamplingParams(stop_boundary="whole")
    assert e.value.param == "stop_boundary"
    assert SamplingParams().stop_boundary == "prefix"


def test_a_longer_stop_failing_its_left_side_does_not_hide_a_shorter_one_ending_there():
    # "a-b" is preceded by the word char "z" (no match); "b" is preceded by "-" and followed by " ": a match
    matcher = StopStringMatcher(["a-b", "b"], boundary="word")
    assert [(m.start, m.end, m.stop) for m in matcher.feed("za-b ")] == [(3, 4, "b")]
