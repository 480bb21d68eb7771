"""SPEC: stop checking costs O(new characters) per token, whatever the text so far.

Counted, not timed: every watcher (stop-string automaton, presets) must be handed each output
character exactly once, and the automaton's fail-chain walks (`_step`) must stop growing once its
transition table is warm, so a long text costs the same per character as a short one.
"""
from __future__ import annotations

from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.stop_strings import StopStringMatcher, _automaton

EOS = frozenset({0})
PIECES = ("ab", " E", "N", "x\n", "(", "ye", "s ", "``", "Q", ":")  # prefixes of the stops, never a stop


def stopper(cls=SequenceStopper) -> SequenceStopper:
    params = SamplingParams(max_tokens=None, stop=["END", "\n\nQ:", "yes!"], stop_presets=["json", "code_block", "turn"],
                            repetition_detection=RepetitionDetection(enabled=False))
    return cls(params, EOS, {}, num_prompt_tokens=1, max_total_tokens=10**9)


class _Counted:
    """A watcher proxy that counts the characters handed to feed."""

    def __init__(self, inner):
        self.inner, self.chars = inner, 0

    def feed(self, chars):
        self.chars += len(chars)
        return self.inner.feed(chars)

    def pending(self):
        return self.inner.pending()


def count_fed(s: SequenceStopper) -> list[_Counted]:
    s._watchers = [_Counted(w) for w in s._watchers]
    return s._watchers


class _CountingMatcher(StopStringMatcher):
    steps = 0

    def _step(self, state, ch):
        type(self).steps += 1
        return super()._step(state, ch)


def feed_tokens(s: SequenceStopper, n: int) -> int:
    chars = 0
    for k in range(n):
        piece = PIECES[k % len(PIECES)]
        assert s.on_token(10 + k % 5, piece) is None
        s.release()
        chars += len(piece)
    return chars


def test_each_character_is_fed_to_each_watcher_once():
    for n in (200, 2000):
        s = stopper()
        watchers = count_fed(s)
        chars = feed_tokens(s, n)
        assert len(watchers) == 4 and [w.chars for w in watchers] == [chars] * 4


def test_automaton_work_stops_growing_once_warm(monkeypatch):
    import haltwise.stopping.sequence_stopper as mod

    monkeypatch.setattr(mod, "StopStringMatcher", _CountingMatcher)
    _CountingMatcher.steps = 0
    _automaton.cache_clear()   # each stopper starts cold (same-stop matchers share the filled transitions)
    feed_tokens(stopper(), 300)
    warm = _CountingMatcher.steps
    _CountingMatcher.steps = 0
    _automaton.cache_clear()
    feed_tokens(stopper(), 3000)
    assert 0 < _CountingMatcher.steps == warm  # ten times the text, not one more fail-chain walk


class RescanningStopper(SequenceStopper):
    """Named fault: every token re-runs the watchers over the whole text so far (O(n) per token)."""

    def _take_text(self, delta_text):
        if not delta_text:
            return []
        text = "".join(self._released_parts + self._unreleased) + delta_text
        for w in self._watchers:
            w.feed(text)
        self._unreleased.append(delta_text)
        self._fed += len(delta_text)
        return []


def test_the_count_catches_a_rescanning_stopper():
    s = stopper(RescanningStopper)
    watchers = count_fed(s)
    chars = feed_tokens(s, 200)
    assert min(w.chars for w in watchers) > 10 * chars


def test_word_mode_automaton_work_stops_growing_once_warm():
    def walks(rounds: int) -> int:
        _CountingMatcher.steps = 0
        _automaton.cache_clear()
        matcher = _CountingMatcher(["ab E", "N(x", "yes", "Q:"], boundary="word")
        for _ in range(rounds):
            matcher.feed("".join(PIECES))
        return _CountingMatcher.steps

    assert 0 < walks(30) == walks(300)
