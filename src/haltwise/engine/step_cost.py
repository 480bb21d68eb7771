"""How long a step takes on this host, learnt from the steps already run, and the prefill chunk that fits a
target step time (docs/engine-steps.md).

A step's time is modelled as

    seconds = fixed + per_token * tokens + per_pair * pairs

where tokens are the step's rows and pairs the (query, key) position pairs its attention computes: a row
at position p attends to p + 1 positions, so a prefill chunk of n tokens from position s has
n * s + n * (n + 1) / 2 pairs. `per_token` holds the linears (weights x layers), `per_pair` the attention
(heads x head_dim x layers), `fixed` what a step pays whatever its size (reading the weights once, Python).
The three are fitted by least squares over recent steps, so the model follows the host as it gets busier
or quieter and needs no start-up probe. Only steps of at least MIN_CHUNK tokens tell the per-token and
per-pair costs apart from the fixed one, so only they age the history (each counts DECAY times less a step
later); a decode-only step is added at weight 1 - DECAY without ageing it: an hour of decoding never makes
the model forget what a prompt costs.

Only scheduling reads it: a chunk boundary never changes a token (the engine is chunk invariant, SPEC §11),
so timing may move boundaries but never the output.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_CHUNK = 32       # a prefill chunk's floor however busy the step: a long prompt always moves
SOLO_FACTOR = 4      # a step with no decode in it may take this many targets: nobody waits on its tokens
DECAY = 0.9          # each step of >= MIN_CHUNK tokens ages the history by this: about the last 10 count
MIN_STEPS = 3        # such steps seen before chunks are sized by the model (until then: uncalibrated_chunk)
# Ridge per term, in SCALE's units. Equal chunks cannot tell a fixed cost from a per-token one: the heavier
# penalty on `fixed` then charges the tokens, which prices bigger chunks dearer (a conservative error),
# until decode steps (few tokens) show what a step costs by itself.
RIDGE = (1e-3, 1e-9, 1e-9)
SCALE = (1.0, 1e-3, 1e-6)   # features in units of 1, 1k tokens, 1M pairs: the normal equations stay balanced


def prefill_pairs(start: int, n: int) -> int:
    """Attention pairs of n prompt tokens at positions start .. start + n - 1."""
    return n * start + n * (n + 1) // 2


@dataclass(slots=True)
class StepCost:
    """Online least-squares model of step time; `max_chunk` inverts it for a prefill chunk."""

    _xtx: list[list[float]] = field(default_factory=lambda: [[0.0] * 3 for _ in range(3)])
    _xty: list[float] = field(default_factory=lambda: [0.0] * 3)
    _coef: tuple[float, float, float] = (0.0, 0.0, 0.0)     # fixed, per 1k tokens, per 1M pairs (>= 0)
    steps: int = 0
    sized_steps: int = 0      # of which with at least MIN_CHUNK tokens

    @property
    def calibrated(self) -> bool:
        return self.sized_steps >= MIN_STEPS

    def observe(self, tokens: int, pairs: int, seconds: float) -> None:
        """Record one step that computed `tokens` rows and `pairs` attention pairs in `seconds`."""
        sized = tokens >= MIN_CHUNK
        age, weight = (DECAY, 1.0) if sized else (1.0, 1.0 - DECAY)
        x = (SCALE[0], tokens * SCALE[1], pairs * SCALE[2])
        for i in range(3):
            self._xty[i] = age * self._xty[i] + weight * x[i] * seconds
            for j in range(3):
                self._xtx[i][j] = age * self._xtx[i][j] + weight * x[i] * x[j]
        self.steps += 1
        self.sized_steps += sized
        self._coef = _nonnegative_fit(self._xtx, self._xty)

    def predict(self, tokens: int, pairs: int) -> float:
        fixed, per_ktoken, per_mpair = self._coef
        return fixed + per_ktoken * tokens * SCALE[1] + per_mpair * pairs * SCALE[2]

    def chunk_cost(self, start: int, n: int) -> float:
        """What n prompt tokens from position `start` add to a step (the fixed part is the step's)."""
        _, per_ktoken, per_mpair = self._coef
        return per_ktoken * n * SCALE[1] + per_mpair * prefill_pairs(start, n) * SCALE[2]

    def step_budget(self, target_s: float, decode_tokens: int, decode_pairs: int,
                    uncalibrated_chunk: int) -> "StepBudget":
        """The time a step's prefill chunks may still take once its decodes are in."""
        return StepBudget(self, target_s - self.predict(decode_tokens, decode_pairs), uncalibrated_chunk)

    def max_chunk(self, start: int, limit: int, seconds_left: float) -> int:
        """The most prompt tokens (<= limit) from position `start` whose tokens and pairs the model prices at
        most `seconds_left`; at least 1. The price grows with n, so a binary search finds it."""
        if self.chunk_cost(start, limit) <= seconds_left:
            return limit
        lo, hi = 1, limit                 # chunk_cost(start, hi) > seconds_left
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.chunk_cost(start, mid) <= seconds_left else (lo, mid)
        return lo


@dataclass(slots=True)
class StepBudget:
    """One step's time left for prefill chunks, spent chunk by chunk as the scheduler sizes them."""

    cost: StepCost
    seconds_left: float
    uncalibrated_chunk: int    # the chunk cap until the model has seen MIN_STEPS steps

    def chunk(self, start: int, limit: int) -> int:
        """The chunk (<= limit tokens, from position `start`) to run this step; spends its predicted time."""
        if not self.cost.calibrated:
            return min(limit, self.uncalibrated_chunk)
        n = max(min(limit, MIN_CHUNK), self.cost.max_chunk(start, limit, self.seconds_left))
        self.seconds_left -= self.cost.chunk_cost(start, n)
        return n


def _nonnegative_fit(xtx: list[list[float]], xty: list[float]) -> tuple[float, float, float]:
    """Least squares over the terms kept, dropping the most negative coefficient until none is (a small
    active-set NNLS: time never falls as a step grows)."""
    keep = [0, 1, 2]
    while keep:
        a = [[xtx[i][j] + (RIDGE[i] if i == j else 0.0) for j in keep] for i in keep]
        solved = _solve(a, [xty[i] for i in keep])
        worst = min(range(len(keep)), key=lambda k: solved[k])
        if solved[worst] >= 0.0:
            coef = [0.0, 0.0, 0.0]
            for k, i in enumerate(keep):
                coef[i] = solved[k]
            return coef[0], coef[1], coef[2]
        keep.pop(worst)
    return 0.0, 0.0, 0.0


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a is small, symmetric positive definite with the ridge)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            for k in range(c, n + 1):
                m[r][k] -= f * m[c][k]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x
