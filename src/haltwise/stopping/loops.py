"""Repetition (loop) detection over output token ids, O(max_period) per token.

A tail of length L is p-periodic when tok[i] == tok[i - p] for every i in the tail past its first
p tokens. The tail loops with period p when it is p-periodic with L >= min_repeats * p (at least
min_repeats full copies) and L >= min_tokens.

Per period p we keep run[p]: how many of the latest tokens satisfy tok[i] == tok[i - p]. The
longest p-periodic tail then has length run[p] + p (once at least p tokens exist).

Defaults (sampling_params.RepetitionDetection): max_period 64 catches a repeated sentence or list
item of up to ~64 tokens; min_repeats 4, since three copies of a phrase occur in normal text
(refrains, enumerations); min_tokens 16, so short runs like "!!!!" or "----" are not loops while a
token repeated 16 times is.
"""
from __future__ import annotations


class RepetitionDetector:
    """Feed output tokens one by one; `append` reports the smallest looping period, if any."""

    __slots__ = ("max_period", "min_repeats", "min_tokens", "_tokens", "_run", "_need")

    def __init__(self, max_period: int = 64, min_repeats: int = 4, min_tokens: int = 16):
        if max_period < 1 or min_repeats < 2 or min_tokens < 1:
            raise ValueError("max_period >= 1, min_repeats >= 2, min_tokens >= 1 required")
        self.max_period = max_period
        self.min_repeats = min_repeats
        self.min_tokens = min_tokens
        self._tokens: list[int] = []
        self._run = [0] * (max_period + 1)  # run[p], index 0 unused
        # need[p]: the periodic tail length that makes a loop of period p.
        self._need = [0] + [max(min_repeats * p, min_tokens) for p in range(1, max_period + 1)]

    def append(self, token_id: int) -> int | None:
        """Add one token; return the smallest period p whose loop the tail now is, else None."""
        toks = self._tokens
        toks.append(token_id)
        n = len(toks)
        run, need = self._run, self._need
        found = None
        for p in range(1, min(self.max_period, n - 1) + 1):
            if toks[n - 1 - p] == token_id:
                run[p] += 1
                if found is None and run[p] + p >= need[p]:
                    found = p
            else:
                run[p] = 0
        return found

    def run(self, period: int) -> int:
        """Tokens of the tail that repeat the token `period` before them (the tail past its first copy)."""
        return self._run[period] if 1 <= period <= self.max_period else 0

    def longest_run(self) -> int:
        """max over periods of run(p): the most tokens of the tail that may yet turn out to be a loop's repeats."""
        return max(self._run)

    def repeats(self, period: int) -> int:
        """Full copies of the `period`-token pattern in the current periodic tail."""
        if not 1 <= period <= self.max_period or len(self._tokens) < period:
            return 0
        return (self._run[period] + period) // period

    @property
    def num_tokens(self) -> int:
        return len(self._tokens)
