"""RepetitionDetector against a brute-force search over every tail and period."""
import pytest
from hypothesis import given, settings, strategies as st

from haltwise.stopping.loops import RepetitionDetector
from tests.stopping.reference import brute_period


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=80), st.integers(1, 8), st.integers(2, 5), st.integers(1, 20),
       st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(0, 12))
def test_detector_equals_brute_force(prefix, max_period, min_repeats, min_tokens, pattern, copies):
    toks = prefix + pattern * copies + prefix[:3]  # random noise, then a planted loop, then noise
    det = RepetitionDetector(max_period, min_repeats, min_tokens)
    for i, t in enumerate(toks):
        assert det.append(t) == brute_period(toks[:i + 1], max_period, min_repeats, min_tokens)


def test_defaults_fire_on_first_qualifying_token():
    det = RepetitionDetector()  # max_period 64, min_repeats 4, min_tokens 16
    hits = [det.append(t) for t in [7] * 16]
    assert hits == [None] * 15 + [1]  # a single token repeated 16 times
    det = RepetitionDetector()
    phrase = [11, 12, 13]
    hits = [det.append(t) for t in [1, 2] + phrase * 6]
    first = next(i for i, h in enumerate(hits) if h)
    assert hits[first] == 3 and first == 2 + 16 - 1  # 4 copies = 12 tokens < 16: needs 16 tokens
    assert det.repeats(3) == 6


def test_long_period_needs_min_repeats_copies():
    det = RepetitionDetector()
    sentence = list(range(100, 140))  # 40 tokens
    hits = [det.append(t) for t in sentence * 4]
    assert hits.index(40) == 4 * 40 - 1 and all(h is None for h in hits[:-1])


def test_no_false_positive_on_distinct_tokens():
    det = RepetitionDetector(max_period=8)
    assert all(det.append(t) is None for t in range(1000))


def test_invalid_settings():
    with pytest.raises(ValueError):
        RepetitionDetector(min_repeats=1)


def test_repeats_counts_copies_only_for_periods_in_range():
    det = RepetitionDetector(max_period=4, min_repeats=2, min_tokens=2)
    for t in [5, 6, 7]:
        det.append(t)
    assert det.repeats(3) == 1                       # exactly one period of tokens: one copy
    assert det.repeats(4) == 0                       # fewer tokens than the period
    for t in [8, 5, 6, 7, 8, 5, 6, 7, 8]:
        det.append(t)
    assert det.repeats(4) == 3                       # the longest period allowed still counts
    assert (det.repeats(0), det.repeats(5), det.repeats(-1)) == (0, 0, 0)   # out of range: none
    same = RepetitionDetector(max_period=4, min_repeats=2, min_tokens=2)
    for _ in range(5):
        same.append(9)
    assert same.repeats(1) == 5
