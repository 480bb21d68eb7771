"""All stop strings of a request in one incremental Aho-Corasick automaton over characters.

The matcher is fed only the new characters of the generated text. It finds every occurrence of
every stop string, including those that span feed (token) boundaries, in amortised O(new chars)
per feed whatever the number of stops, and tells how much of the text's tail must be held back
from a stream because it could still grow into a stop string.

Holdback, for stops {"\\n\\n", "END"} after the text "...the E":

    text:     . . . t h e ␣ E
                            ^-- automaton state = node "E" (depth 1, has children) -> pending() = 1
    released: . . . t h e ␣ |   (the "E" is held until the next chars show it is not "END")

Word boundaries (boundary="word"): a stop whose first character is a word character (str.isalnum()
or "_", the same class as Python's re \\w) only counts when the character before it is not one (or
it starts the text); a stop whose last character is a word character only counts when the character
after it is not one. So for the stop "END", "ENDING" and "BACKEND" are not cut, "THE END." is. A
stop such as "Q:" needs a boundary only before it; "\\n\\n" behaves as in prefix mode. The right side
of a match at the end of the text so far is not known yet: the match is *pending* and held back
(pending() covers it) until the next character decides it; `flush()` ends the text, where the end
counts as a boundary (as $ or \\b at the end in a regex), and returns the pending matches.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

Boundary = Literal["prefix", "word"]


def is_word_char(ch: str) -> bool:
    """The character class of Python's re \\w for str patterns."""
    return ch.isalnum() or ch == "_"


@dataclass(frozen=True, slots=True)
class Match:
    """One occurrence in the text fed so far, in absolute character offsets.

    The text is cut at `start` (what is returned ends there); with include_stop_str_in_output it
    is cut at `end`. `stop` is the matched text; `preset` names a structural preset, else None.
    """

    start: int
    end: int
    stop: str
    preset: str | None = None


class TextStop(Protocol):
    """What the per-sequence stopper needs from a stop-string matcher or a structural preset."""

    def feed(self, chars: str) -> list[Match]:
        """Consume new characters; return occurrences completed by them, ordered by `end`."""
        ...

    def pending(self) -> int:
        """Length of the text's tail that could still become part of a cut; hold it back."""
        ...


class StopStringMatcher:
    """Incremental multi-string matcher (Aho-Corasick) with a streaming holdback.

    Node 0 is the root (the empty prefix). For each node:
      children[n]  trie edges;                  fail[n]  longest proper suffix that is a node;
      depth[n]     length of the prefix it spells;
      outputs[n]   stop lengths ending here (its own and via fail links), as indices into _stops;
      hold[n]      depth of the longest suffix of n's prefix that is a *proper* prefix of a stop,
                   i.e. the deepest node on n's fail chain that has children.

    Word mode also keeps, per stop, whether each side needs a boundary (_left/_right), the
    word-character flags of the last max_len + 1 characters as bits (bit 0 = last character), and
    the right-pending matches, all ending at the current position.
    """

    __slots__ = ("_stops", "_children", "_fail", "_depth", "_outputs", "_hold", "_delta", "_state", "_pos",
                 "_word", "_left", "_right", "_bits", "_bits_mask", "_waiting")

    def __init__(self, stops: Sequence[str], boundary: Boundary = "prefix"):
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        if boundary not in ("prefix", "word"):
            raise ValueError(f"boundary must be 'prefix' or 'word', got {boundary!r}")
        a = _automaton(tuple(sorted(set(stops))), boundary)   # order of the list never matters; shared
        self._stops, self._word, self._left, self._right = a.stops, a.word, a.left, a.right
        self._children, self._depth, self._fail = a.children, a.depth, a.fail
        self._outputs, self._hold, self._delta, self._bits_mask = a.outputs, a.hold, a.delta, a.bits_mask
        # Per matcher: the only fields a feed changes (besides the shared, lazily filled _delta).
        self._bits = 0
        self._waiting: list[Match] = []  # word mode: matches whose right side is not known yet
        self._state = 0
        self._pos = 0  # characters fed so far

    @property
    def stops(self) -> tuple[str, ...]:
        return self._stops

    @property
    def position(self) -> int:
        """Characters fed so far (absolute offset of the next character)."""
        return self._pos

    def _step(self, state: int, ch: str) -> int:
        table = self._delta[state]
        nxt = table.get(ch)
        if nxt is None:
            nxt = 0 if state == 0 else self._step(self._fail[state], ch)
            table[ch] = nxt
        return nxt

    def feed(self, chars: str) -> list[Match]:
        """Consume new characters; return the occurrences they complete, ordered by end offset."""
        matches: list[Match] = []
        state, pos = self._state, self._pos
        delta, outputs, stops = self._delta, self._outputs, self._stops
        if self._word:
            return self._feed_words(chars)
        for ch in chars:
            nxt = delta[state].get(ch)
            state = self._step(state, ch) if nxt is None else nxt
            pos += 1
            if outputs[state]:
                for i in outputs[state]:
                    stop = stops[i]
                    matches.append(Match(pos - len(stop), pos, stop))
        self._state, self._pos = state, pos
        return matches

    def _feed_words(self, chars: str) -> list[Match]:
        """feed() in word mode: the same walk, plus the boundary checks on both sides."""
        matches: list[Match] = []
        state, pos, bits, mask = self._state, self._pos, self._bits, self._bits_mask
        delta, outputs, stops, left, right = self._delta, self._outputs, self._stops, self._left, self._right
        waiting = self._waiting
        for ch in chars:
            word = ch.isalnum() or ch == "_"  # is_word_char, inlined (hot loop)
            if waiting:  # ch is the character after every waiting match: it decides them all
                if not word:
                    matches += waiting
                waiting = []
            nxt = delta[state].get(ch)
            state = self._step(state, ch) if nxt is None else nxt
            pos += 1
            bits = ((bits << 1) | word) & mask
            for i in outputs[state]:
                n = len(stops[i])
                if left[i] and (bits >> n) & 1:  # the character before the match is a word character
                    continue
                m = Match(pos - n, pos, stops[i])
                (waiting if right[i] else matches).append(m)
        self._state, self._pos, self._bits, self._waiting = state, pos, bits, waiting
        return matches

    def flush(self) -> list[Match]:
        """The text ends here: the pending matches count (the end is a boundary); returns and clears them."""
        out, self._waiting = self._waiting, []
        return out

    def pending(self) -> int:
        """Length of the longest suffix of the text fed so far that is a proper prefix of a stop,
        or, in word mode, that starts a match still waiting for its right side (the longer)."""
        hold = self._hold[self._state]
        if self._waiting:
            return max(hold, self._pos - min(m.start for m in self._waiting))
        return hold


class _Automaton:
    """The immutable part of a StopStringMatcher (see its docstring for the fields), shared by every
    matcher of the same stops and boundary. `delta` is filled lazily, but each entry is a function
    of (state, character) only, so whichever matcher fills it, all read the same transitions."""

    __slots__ = ("stops", "word", "left", "right", "bits_mask", "children", "depth", "fail", "outputs", "hold",
                 "delta")

    def __init__(self, stops: tuple[str, ...], boundary: Boundary):
        self.stops = stops
        self.word = boundary == "word"
        self.left = tuple(self.word and is_word_char(s[0]) for s in stops)
        self.right = tuple(self.word and is_word_char(s[-1]) for s in stops)
        self.bits_mask = (1 << (max(map(len, stops), default=0) + 1)) - 1
        self.children: list[dict[str, int]] = [{}]
        self.depth: list[int] = [0]
        own: list[list[int]] = [[]]
        for i, stop in enumerate(stops):
            node = 0
            for ch in stop:
                nxt = self.children[node].get(ch)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][ch] = nxt
                    self.children.append({})
                    self.depth.append(self.depth[node] + 1)
                    own.append([])
                node = nxt
            own[node].append(i)
        self._build_links(own)
        # Lazily filled full transition table: delta[n][ch] = next state (saves fail-chain walks).
        self.delta: list[dict[str, int]] = [dict(c) for c in self.children]

    def _build_links(self, own: list[list[int]]) -> None:
        n = len(self.children)
        self.fail = [0] * n
        outputs: list[tuple[int, ...]] = [()] * n
        hold = [0] * n
        order = [0]  # breadth-first: a node's fail target is always shallower, so already done
        for node in order:
            for ch, child in self.children[node].items():
                order.append(child)
                if node != 0:
                    f = self.fail[node]
                    while f and ch not in self.children[f]:
                        f = self.fail[f]
                    self.fail[child] = self.children[f].get(ch, 0)
            if node:
                outputs[node] = tuple(own[node]) + outputs[self.fail[node]]
                hold[node] = self.depth[node] if self.children[node] else hold[self.fail[node]]
        self.outputs = outputs
        self.hold = hold


@functools.lru_cache(maxsize=8)
def _automaton(stops: tuple[str, ...], boundary: Boundary) -> _Automaton:
    """A memo, not state: the automaton of 64 stops of 256 characters takes 20-100 ms to build, and a
    request with n choices and several prompts builds one matcher per sequence on the engine thread
    (256 of them took 33 s on a loaded 2-core host). With the memo they share one automaton (at most 8
    are kept, a few MB each at the stop limits)."""
    return _Automaton(stops, boundary)
