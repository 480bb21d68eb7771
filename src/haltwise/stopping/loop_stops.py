"""The rule layer of one sequence's stopper: the exact and near loop detectors over the answer's tokens.

Under a grammar the exact detector cuts where the repetition began (after the pattern's first copy), never
where it was found: tokens that repeat an earlier one at some period (loops.RepetitionDetector.longest_run)
are held back until they cannot be a loop's repeats, so the cut never retracts streamed text; the engine
then closes the structure there (structured/closing.py). Without a grammar the repeats are kept.

    answer tokens:   ... [ first copy ][ repeat ][ repeat ]     run = the repeats' tokens
    text:            ...             ^ cut = characters fed after the first copy's last token
"""
from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from typing import Protocol

from haltwise.sampling_params import RepetitionDetection
from haltwise.stopping import criteria
from haltwise.stopping.loops import RepetitionDetector
from haltwise.stopping.near_loops import NearLoopDetector
from haltwise.stopping.termination import Reason, Termination


class CallCuts(Protocol):
    """Where complete tool calls end (toolcalls/call_ends.CallEnds)."""

    def cut(self, limit: int, released: int, tokens: Callable[[int], tuple[int, bool]]) -> tuple[int, int] | None: ...

    def termination(self, loop: Termination, offset: int, token_index: int) -> Termination: ...


class LoopStops:
    """Feeds the detectors one answer token at a time; says how much text a possible loop holds back."""

    def __init__(self, rd: RepetitionDetection, grammar: bool, calls: CallCuts | None = None):
        self._loops = RepetitionDetector(rd.max_period, rd.min_repeats, rd.min_tokens)
        self._near = (NearLoopDetector(rd.near_loop_ngram, rd.near_loop_window, rd.near_loop_max_novelty)
                      if rd.near_loops else None)
        self.cuts_where_it_began = grammar   # a loop's termination positions the final cut (module docstring)
        self._answer_ends: list[int] = []    # characters fed after each answer token (when cuts_where_it_began)
        self._calls = calls if grammar else None   # where tool calls end (toolcalls/call_ends.py)

    def append(self, token_id: int) -> tuple[int | None, bool]:
        """Take an answer token: (the exact detector's period or None, whether the near detector fired)."""
        period = self._loops.append(token_id)
        return period, self._near.append(token_id) if self._near is not None else False

    def answer_token_fed(self, fed: int) -> None:
        """The answer token's text is taken in: `fed` characters so far."""
        if self.cuts_where_it_began:
            self._answer_ends.append(fed)

    def answer_tokens_through(self, offset: int) -> tuple[int, bool]:
        """(answer tokens through the one holding character offset - 1, whether one ends exactly at offset)."""
        ends = self._answer_ends
        k = bisect.bisect_left(ends, offset)
        if offset == 0:
            return 0, True
        return k + 1, k < len(ends) and ends[k] == offset

    def held(self, fed: int) -> int:
        """Characters at the end of the text that may still be a loop's repeats (0 without a grammar)."""
        run = self._loops.longest_run() if self.cuts_where_it_began else 0
        if not run:
            return 0
        ends = self._answer_ends
        return fed - (ends[-run - 1] if run < len(ends) else 0)

    def termination(self, n: int, period: int | None, near: bool, fed: int, text: Callable[[], str],
                    released: int = 0) -> Termination | None:
        """The loop found on output token n, if any; text() gives the text so far (for the near loop's detail).
        After complete tool calls it is a tool_loop cut where the last one ends, not before `released`
        characters (toolcalls/call_ends.py). A cut earlier than fed: char_offset, token_index + 1 tokens kept."""
        term = self._loop(n, period, near, fed, text)
        if term is None or self._calls is None:
            return term
        found = self._calls.cut(term.char_offset, released, self.answer_tokens_through)
        if found is None:
            return term
        kept = n - (len(self._answer_ends) - found[1])
        return self._calls.termination(term, found[0], kept - 1)

    def _loop(self, n: int, period: int | None, near: bool, fed: int, text: Callable[[], str]) -> Termination | None:
        if criteria.check_repetition(period):
            assert period is not None
            repeats = self._loops.repeats(period)
            if self.cuts_where_it_began:   # the repeats are dropped: token_index and char_offset are the cut
                run = self._loops.run(period)
                kept_answer = len(self._answer_ends) - run
                cut = self._answer_ends[kept_answer - 1] if kept_answer > 0 else 0
                return Termination(Reason.REPETITION, f"period {period} repeated {repeats} times; cut where "
                                   f"it began (token {n - run}, char {cut})", token_index=n - run - 1,
                                   char_offset=cut)
            return Termination(Reason.REPETITION, f"period {period} repeated {repeats} times",
                               token_index=n - 1, char_offset=fed)
        if near:
            assert self._near is not None
            tail = text()[-48:]
            near_loop = self._near
            return Termination(Reason.REPETITION, f"near-loop detector: only {near_loop.novelty:.0%} of the last "
                               f"{near_loop.window} {near_loop.ngram}-grams are new; the text ends {json.dumps(tail)}",
                               token_index=n - 1, char_offset=fed)
        return None
