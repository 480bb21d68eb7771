"""StopStringMatcher against a brute-force reference over random texts, stop sets and chunkings."""
from hypothesis import given, settings, strategies as st

from haltwise.stopping.stop_strings import Match, StopStringMatcher

ALPHABET = "ab \n\té€"
texts = st.text(alphabet=ALPHABET, max_size=60)
stop_sets = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=5), min_size=1, max_size=6)


def chunk(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


def brute_matches(text: str, stops: list[str]) -> set[tuple[int, int, str]]:
    return {(i, i + len(s), s) for s in set(stops) for i in range(len(text) - len(s) + 1) if text.startswith(s, i)}


def brute_pending(text: str, stops: list[str]) -> int:
    return max((k for k in range(1, len(text) + 1) for s in stops
                if k < len(s) and s.startswith(text[len(text) - k:])), default=0)


@settings(max_examples=300, deadline=None)
@given(texts, stop_sets, st.lists(st.integers(0, 60), max_size=20))
def test_matches_and_pending_equal_brute_force_for_any_chunking(text, stops, cuts):
    m = StopStringMatcher(stops)
    found: list[Match] = []
    fed = ""
    for piece in chunk(text, cuts):
        new = m.feed(piece)
        # each feed reports exactly the occurrences its characters complete, ordered by end
        assert all(len(fed) < x.end <= len(fed) + len(piece) for x in new)
        assert [x.end for x in new] == sorted(x.end for x in new)
        fed += piece
        found += new
        assert m.pending() == brute_pending(fed, stops)
        assert m.position == len(fed)
    assert {(x.start, x.end, x.stop) for x in found} == brute_matches(text, stops)
    assert len(found) == len(brute_matches(text, stops))  # no duplicates, even for duplicate stops


def test_match_spans_feed_boundaries():
    m = StopStringMatcher(["</answer>", "\n\n"])
    assert m.feed("the result</an") == []
    assert m.pending() == 4
    assert m.feed("swer") == []
    assert m.feed(">tail") == [Match(10, 19, "</answer>")]
    assert m.pending() == 0


def test_prefix_stops_and_overlaps_report_every_occurrence():
    m = StopStringMatcher(["ab", "abab", "b"])
    got = m.feed("ababa")
    assert [(x.start, x.end, x.stop) for x in got] == [
        (0, 2, "ab"), (1, 2, "b"), (0, 4, "abab"), (2, 4, "ab"), (3, 4, "b")]
    # "aba" could still grow into "abab" -> the longest pending proper prefix is "aba"
    assert m.pending() == 3


def test_pending_ignores_a_complete_stop_that_cannot_grow():
    m = StopStringMatcher(["xyz"])
    m.feed("axyz")
    assert m.pending() == 0
    m.feed("xy")
    assert m.pending() == 2


def test_multibyte_and_empty_feeds():
    m = StopStringMatcher(["é€"])
    assert m.feed("") == []
    assert m.feed("aé") == [] and m.pending() == 1
    assert m.feed("€") == [Match(1, 3, "é€")]  # character offsets, not bytes


def test_empty_stop_rejected():
    import pytest
    with pytest.raises(ValueError):
        StopStringMatcher(["a", ""])
