"""stopping/stop_strings.py: matchers of the same stops share one automaton (built once per stop set,
not once per sequence); sharing never changes what any of them matches or holds back."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.stop_strings import StopStringMatcher, _automaton

ALPHABET = "ab c\n"


def run_alone(stops: list[str], boundary: str, chunks: list[str]) -> list[tuple]:
    _automaton.cache_clear()            # a fresh automaton: nothing filled in by other matchers
    m = StopStringMatcher(stops, boundary)
    return [(tuple((x.start, x.end, x.stop) for x in m.feed(c)), m.pending()) for c in chunks]


@settings(max_examples=200, deadline=None)
@given(stops=st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4),
       boundary=st.sampled_from(["prefix", "word"]),
       texts=st.lists(st.lists(st.text(ALPHABET, max_size=5), max_size=8), min_size=2, max_size=4))
def test_interleaved_matchers_on_one_automaton_match_as_if_alone(stops, boundary, texts) -> None:
    expected = [run_alone(stops, boundary, chunks) for chunks in texts]
    _automaton.cache_clear()
    matchers = [StopStringMatcher(stops, boundary) for _ in texts]
    got: list[list[tuple]] = [[] for _ in texts]
    for step in range(max(map(len, texts))):    # round-robin, as the engine feeds a batch
        for i, (m, chunks) in enumerate(zip(matchers, texts)):
            if step < len(chunks):
                got[i].append((tuple((x.start, x.end, x.stop) for x in m.feed(chunks[step])), m.pending()))
    assert got == expected


def test_the_sequences_of_a_request_share_one_automaton() -> None:
    stops = tuple("x" * 255 + chr(65 + i) for i in range(64))
    params = SamplingParams(stop=stops, n=64)
    a, b = (SequenceStopper(params, frozenset({0}), {}, 5, 1000) for _ in range(2))
    assert a._matcher is not b._matcher and a._matcher._children is b._matcher._children
    assert StopStringMatcher(list(reversed(stops)))._children is a._matcher._children   # order never matters
