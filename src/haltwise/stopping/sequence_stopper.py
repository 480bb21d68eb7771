"""One object per sequence that runs every termination check right after each appended token.

The engine calls `on_token` once per output token with the detokenizer's new text for it, then
`release()` for the stream, and `finish(term)` once the sequence ends for any reason:

    text fed:   [ released ........ | held back ... ]     held back = longest tail that may still
                0              released         fed       grow into a stop (max over all stops)
    final text: [ ............ cut )                      cut <= fed; released <= cut always

Order of checks (SPEC §2), all in the same call as the token that triggers them:
  1. content, only once num_output_tokens >= min_tokens: stop_token_ids, a stop string that is a
     special token's text (as that token id), eos (unless ignore_eos), then stop strings and
     presets in the text (the occurrence starting earliest wins; ties: the one ending first);
  2. limits: max_tokens, then the context window;
  3. the repetition detector.
A content stop on the token that also reaches a limit wins: the text is complete.
Under a grammar the exact loop detector cuts where the repetition began (loop_stops.py); either detector,
firing after complete tool calls, cuts after the last one (reason tool_loop, toolcalls/call_ends.py). Which stops
are special tokens and which text watchers run (presets, the tool-call loop watch): stop_set.py.
Under a grammar (`structure_complete` passed to on_token): the token that completes the structure
ends the sequence with reason grammar, even below min_tokens; a stop string in the same token's
text still wins (it cuts earlier); an end token that closes the structure counts as the grammar's
end, not eos. The `json` preset is off under a grammar (the grammar ends JSON exactly).
Whole-word stops (params.stop_boundary == "word", see stop_strings.py): a match is decided by the
character after it, so it is taken at the token that brings that character (content checks must
be active at that token). When the sequence ends for any other reason while a match at the very
end is still waiting, the end of the text is a boundary: the match counts, as if found on that last
token, and wins like any content stop (over eos, limits, a loop or the grammar end). For reasons
decided outside (timeout, cancelled, error) it only moves the cut; the reason stays.
Reasoning tokens (on_token(answer=False), stopping/reasoning.py) feed no text: only eos and the
limits apply to them; every other check, the loop detectors included, sees the answer alone.
`stop_presets: ["auto"]` is resolved before the stopper (stopping/intent.py); params.auto_presets,
the classifier's report, is appended to every termination detail.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Mapping, Sequence

from haltwise.sampling_params import SamplingParams
from haltwise.stopping import criteria
from haltwise.stopping.loop_stops import LoopStops
from haltwise.stopping.presets import DEFAULT_TURN_MARKERS
from haltwise.stopping.stop_set import preset_watchers, special_token_stops
from haltwise.stopping.stop_strings import Match, StopStringMatcher, TextStop
from haltwise.stopping.termination import Reason, Termination


class SequenceStopper:
    """Termination checks, holdback and the final cut for one sequence's output text."""

    def __init__(self, params: SamplingParams, eos_token_ids: frozenset[int],
                 special_token_texts: Mapping[str, int], num_prompt_tokens: int, max_total_tokens: int,
                 turn_markers: Sequence[str] = ()):
        self._params = params
        self._eos = frozenset(eos_token_ids)
        self._stop_ids = frozenset(params.stop_token_ids)
        self._num_prompt = num_prompt_tokens
        self._max_total = max_total_tokens
        markers = tuple(turn_markers) or DEFAULT_TURN_MARKERS
        self._special = special_token_stops(params, special_token_texts, markers)   # token id -> stop
        self._matcher = StopStringMatcher(params.stop, params.stop_boundary) if params.stop else None
        self._watchers: list[TextStop] = [self._matcher] if self._matcher is not None else []
        self._watchers += preset_watchers(params, markers)
        rd = params.repetition_detection
        grammar = params.structured_outputs is not None
        calls = params.tool_calls.call_ends() if params.tool_calls is not None and grammar and rd.enabled else None
        self._watchers += [calls] if calls is not None else []      # it holds back what follows a complete call
        self._loops = LoopStops(rd, grammar, calls) if rd.enabled else None

        self._num_tokens = 0            # output tokens seen by on_token
        self._fed = 0                   # characters of output text taken in
        self._released_parts: list[str] = []
        self._released = 0              # characters handed out by release()/finish()
        self._unreleased: list[str] = []  # text[_released:_fed], in chunks
        self._cut: int | None = None    # final text length once a content stop is found
        self._kept: int | None = None   # tokens that count once a content stop is found
        self._term: Termination | None = None
        self._final: str | None = None

    # ---- per token -------------------------------------------------------------------------
    def on_token(self, token_id: int, delta_text: str, structure_complete: str | None = None,
                 answer: bool = True) -> Termination | None:
        """Take one appended output token and its new text; return a Termination if it ends here.

        structure_complete: the constraint's name when this token completed the request's grammar.
        answer: False for a reasoning-section token (stopping/reasoning.py): limits and eos only.
        """
        if self._term is not None:
            raise RuntimeError("on_token after the sequence terminated")
        index = self._num_tokens
        self._num_tokens += 1
        n = self._num_tokens
        if not answer:
            return self._reasoning_token(token_id, index, n)
        period, near = self._loops.append(token_id) if self._loops is not None else (None, False)
        active = criteria.content_checks_active(n, self._params.min_tokens)
        matches: list[Match] = []
        if structure_complete is not None and token_id in self._eos:
            term = self._grammar_stop(structure_complete, index, f"end token {token_id}")
        else:
            term = self._token_stop(token_id, index, delta_text) if active else None
            if term is None:
                matches = self._take_text(delta_text)
                if active and matches:
                    term = self._text_stop(matches, index)
            if term is None and structure_complete is not None:
                term = self._grammar_stop(structure_complete, index, f"token {index}")
        if self._loops is not None:
            self._loops.answer_token_fed(self._fed)
        if term is None:
            term = self._limit_or_loop(n, period, near)
        if term is not None:
            term = self._noted(self._settle_waiting(term, matches, index, active))
            self._term = term
        return term

    def _reasoning_token(self, token_id: int, index: int, n: int) -> Termination | None:
        """Inside reasoning only eos (as vLLM: the model ended its turn) and the limits end the request."""
        term = None
        if criteria.content_checks_active(n, self._params.min_tokens) and \
                criteria.check_eos(token_id, self._eos, self._params.ignore_eos):
            term = self._content_stop(Reason.EOS, f"eos token {token_id} at token {index}, inside the reasoning",
                                      index, self._fed, None)
        term = term or self._limit_or_loop(n, None)
        if term is not None:
            self._term = term = self._noted(term)
        return term

    def _settle_waiting(self, term: Termination, matches: list[Match], index: int, active: bool) -> Termination:
        """The text ends with this token: whole-word matches still waiting at its end count now."""
        waiting = self._matcher.flush() if self._matcher is not None else []
        if not (waiting and active):
            return term
        return self._text_stop(matches + waiting, index)

    def _noted(self, term: Termination) -> Termination:
        if self._params.auto_presets is None:
            return term
        return dataclasses.replace(term, detail=f"{term.detail} [{self._params.auto_presets}]")

    def _token_stop(self, token_id: int, index: int, delta_text: str) -> Termination | None:
        """Stop tokens, special-token stop strings and eos; the token's own text is not returned
        unless include_stop_str_in_output (with skip_special_tokens it is empty anyway)."""
        if criteria.check_stop_token(token_id, self._stop_ids):
            reason, stop_reason, detail = Reason.STOP_TOKEN, token_id, f"stop token {token_id} at token {index}"
        elif token_id in self._special:
            stop_reason, preset = self._special[token_id]
            reason = Reason.STOP_STRING
            detail = (f"stop preset turn: special token {token_id} at token {index}" if preset
                      else f"stop string {json.dumps(stop_reason)} as special token {token_id} at token {index}")
        elif criteria.check_eos(token_id, self._eos, self._params.ignore_eos):
            reason, stop_reason, detail = Reason.EOS, None, f"eos token {token_id} at token {index}"
        else:
            return None
        cut = self._fed
        if self._params.include_stop_str_in_output:
            self._take_text(delta_text)
            cut = self._fed
        return self._content_stop(reason, detail, index, cut, stop_reason)

    def _take_text(self, delta_text: str) -> list[Match]:
        if not delta_text:
            return []
        self._unreleased.append(delta_text)
        self._fed += len(delta_text)
        matches: list[Match] = []
        for w in self._watchers:
            matches += w.feed(delta_text)
        return matches

    def _text_stop(self, matches: list[Match], index: int) -> Termination:
        best = min(matches, key=lambda m: (m.start, m.end))
        cut = best.end if self._params.include_stop_str_in_output else best.start
        if best.preset == "tool_loop":    # the withheld call is never returned (toolcalls/loop_watch.py)
            return self._content_stop(Reason.TOOL_LOOP, best.stop, index, best.start, None)
        if best.preset is None:
            return self._content_stop(Reason.STOP_STRING, f"stop string {json.dumps(best.stop)} at char {best.start}",
                                      index, cut, best.stop)
        return self._content_stop(Reason.STOP_STRING, f"stop preset {best.preset} at char {best.start}",
                                  index, cut, best.preset)

    def _grammar_stop(self, constraint: str, index: int, where: str) -> Termination:
        return self._content_stop(Reason.GRAMMAR, f"{constraint} complete at {where}", index, self._fed, None)

    def _content_stop(self, reason: Reason, detail: str, index: int, cut: int,
                      stop_reason: str | int | None) -> Termination:
        self._cut, self._kept = cut, index + 1
        return Termination(reason, detail, token_index=index, char_offset=cut, stop_reason=stop_reason)

    def _limit_or_loop(self, n: int, period: int | None, near: bool = False) -> Termination | None:
        p = self._params
        if criteria.check_max_tokens(n, p.max_tokens):
            return Termination(Reason.MAX_TOKENS, f"max_tokens {p.max_tokens} reached",
                               token_index=n - 1, char_offset=self._fed)
        if criteria.check_context_limit(self._num_prompt, n, self._max_total):
            return Termination(Reason.CONTEXT_LIMIT, f"context window {self._max_total} reached "
                               f"({self._num_prompt} prompt + {n} output tokens)", token_index=n - 1,
                               char_offset=self._fed)
        if self._loops is None:
            return None
        term = self._loops.termination(n, period, near, self._fed,
                                       lambda: "".join(self._released_parts + self._unreleased), self._released)
        if term is not None and (term.reason is Reason.TOOL_LOOP or period is not None and
                                 self._loops.cuts_where_it_began):   # cut where it began / after the calls
            self._cut, self._kept = term.char_offset, term.token_index + 1
        return term

    # ---- text out --------------------------------------------------------------------------
    def _pending(self) -> int:
        held = max((w.pending() for w in self._watchers), default=0)
        if self._loops is not None:
            held = max(held, self._loops.held(self._fed))
        return held

    def release(self) -> str:
        """Newly releasable text: extends a prefix of the final text; never retracted later."""
        if self._final is not None:
            return ""
        end = self._fed - self._pending() if self._cut is None else self._cut
        return self._hand_out(end)

    def _hand_out(self, end: int) -> str:
        if end <= self._released:
            return ""
        pending = "".join(self._unreleased)
        out, rest = pending[:end - self._released], pending[end - self._released:]
        self._unreleased = [rest] if rest else []
        self._released_parts.append(out)
        self._released = end
        return out

    def finish(self, term: Termination) -> str:
        """End the sequence for any reason; return the rest of the text to release.

        After a content stop: the text up to the cut. Any other reason (limits, repetition,
        timeout, error, cancelled): everything held back, since it can no longer become a stop
        (for cancelled the caller may drop it). A second call returns "".
        """
        if self._final is not None:
            return ""
        self._cut_at_waiting()
        if self._term is None:
            self._term = term
        end = self._fed if self._cut is None else self._cut
        if end < self._released:
            raise RuntimeError(f"holdback invariant broken: released {self._released} chars, cut at {end}")
        out = self._hand_out(end)
        self._final = "".join(self._released_parts)
        self._released_parts = [self._final]
        self._unreleased = []
        return out

    def terminate(self, reason: Reason, detail: str = "") -> Termination:
        """A Termination for a reason decided outside (timeout, cancelled, error), positioned here."""
        self._cut_at_waiting()
        kept = self.num_output_tokens_kept
        end = self._fed if self._cut is None else self._cut
        return self._noted(Termination(reason, detail, token_index=kept - 1, char_offset=end))

    def _cut_at_waiting(self) -> None:
        """An end decided outside: a whole-word match waiting at the text's end moves the cut to it."""
        waiting = self._matcher.flush() if self._matcher is not None else []
        if waiting and self._cut is None and criteria.content_checks_active(self._num_tokens, self._params.min_tokens):
            best = min(waiting, key=lambda m: (m.start, m.end))
            self._cut = best.end if self._params.include_stop_str_in_output else best.start
            self._kept = self._num_tokens

    # ---- state -----------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The final text once finished; before that, the text released so far."""
        return self._final if self._final is not None else "".join(self._released_parts)

    def text_through_cut(self) -> str:
        """The text fed so far, up to the cut once one is decided (before finish)."""
        text = "".join(self._released_parts + self._unreleased)
        return text if self._cut is None else text[:self._cut]

    @property
    def text_was_cut(self) -> bool:
        """Once finished: the final text is shorter than the text taken in (a stop cut it)."""
        return self._final is not None and len(self._final) < self._fed

    @property
    def num_output_tokens_kept(self) -> int:
        """Output tokens that count: up to the one completing a stop; later ones are dropped."""
        return self._num_tokens if self._kept is None else self._kept

    @property
    def termination(self) -> Termination | None:
        return self._term

    def masked_token_ids(self) -> frozenset[int]:
        """Token ids whose logits must be masked while num_output_tokens < min_tokens."""
        if self._num_tokens >= self._params.min_tokens:
            return frozenset()
        ids = self._stop_ids | frozenset(self._special)
        return ids if self._params.ignore_eos else ids | self._eos
