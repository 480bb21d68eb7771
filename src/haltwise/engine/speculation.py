"""Exact speculative decoding: drafts from prompt lookup or a draft model, verified in the decode step itself.

Drafts. With a draft model (--draft-model; engine/draft_model.py) the draft model proposes for every
sequence it can hold, its draft length adapting per sequence (DraftLength); prompt lookup then drafts only
for a sequence the draft model cannot hold (longer than its pool or window). Without one, a running
decode sequence whose last n tokens (n = MAX_NGRAM down to MIN_NGRAM) occurred earlier in its prompt +
output proposes the up-to-K tokens that followed the most recent such occurrence (PromptLookup: an
incremental index, O(MAX_NGRAM) work per new token, none per lookup beyond a dict get).

Verification. The scheduler gives such a sequence 1 + k new positions (its last token and k drafts, like
a chunk; drafts come last, from what budget and free blocks remain after every other sequence: they never
preempt or delay anyone). The runner returns logits at all 1 + k positions. On the default path every step
runs the batch-invariant native layer stack, so a position's logits do not depend on the chunk it came in
(tests/engine/test_speculation_real.py checks them against single-token decode, bit for bit).

Acceptance (Speculator.accept). Position 0 is sampled as any decode would sample it. While the token
sampled at position j equals draft j, position j + 1 is sampled next -- with the sequence's own sampling
row, which now includes the accepted tokens (penalties, min_tokens bans), and its own generator. The first
token that differs from its draft is kept and the draws stop. Each kept token is exactly the token
non-speculative decoding samples at that position from the same logits with the same generator state, so
the output is IDENTICAL to decoding without speculation, greedy or seeded; for a point-mass draft this is
also the optimal acceptance rule (draft j is accepted with probability p(draft j)). Every kept token goes
through SeqOutputState.on_token one at a time: the first termination ends the run there.

Not speculated (decoded one token a step as before): grammar-constrained sequences and sequences with a
reasoning section; nothing at all off the default path or with dynamic RoPE (speculation_unsupported).

KV. Rejected positions' KV is never counted as computed: after acceptance num_computed_tokens = num_tokens
- 1 as after any decode, blocks beyond the sequence's length are returned (BlockAllocator.trim), and only
full, computed blocks are hashed into the prefix cache, so no block holding unverified draft KV is shared.
"""
from __future__ import annotations

import torch

from haltwise.engine.sampler import Sampler
from haltwise.outputs import TokenLogprob
from haltwise.stopping.termination import Reason, Termination

MAX_NGRAM = 3   # the longest suffix looked up
MIN_NGRAM = 2   # the shortest (1-token matches propose mostly wrong drafts in plain chat: they cost a step)


def speculation_unsupported(config, model) -> str:
    """Why this engine cannot speculate exactly, or "" when it can.

    Exact means a verified position's logits are bit for bit those of a single-token decode: true where
    every step runs the batch-invariant native stack (the default path); elsewhere (--dtype float32 or
    bfloat16, --nondeterministic-kernels) a chunk rounds differently from a single row, which may flip a
    near-tie. Dynamic RoPE scales its tables with the known length, which drafts would change.
    """
    native = getattr(getattr(model, "model", None), "native_decode", None)
    if native is None or not native.every_step:
        return "the steps are not batch invariant (only the default path, --dtype auto, is)"
    scaling = config.rope_scaling or {}
    if (scaling.get("rope_type") or scaling.get("type")) == "dynamic":
        return "dynamic RoPE scaling"
    return ""


class PromptLookup:
    """Where each n-gram (MIN_NGRAM..MAX_NGRAM) last occurred with a token after it.

    _last[(n-gram)] = e: tokens[e - n : e] is that n-gram's most recent occurrence followed by tokens[e]
    (e < len(tokens)). The sequence's own current suffix is indexed only once a token follows it, so a
    lookup never finds itself. Tokens are only ever appended (truncation happens when a sequence ends).
    """

    def __init__(self) -> None:
        self._last: dict[tuple[int, ...], int] = {}
        self._indexed = 1   # positions e < _indexed have been indexed (e = 0 has no n-gram before it)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """The k tokens that followed the most recent earlier occurrence of the longest matching suffix
        (n = MAX_NGRAM down to MIN_NGRAM), or [] when none occurred."""
        if k <= 0:
            return []
        for e in range(self._indexed, len(tokens)):   # index the n-grams that now have a follower
            for n in range(MIN_NGRAM, min(MAX_NGRAM, e) + 1):
                self._last[tuple(tokens[e - n:e])] = e
        self._indexed = max(self._indexed, len(tokens))
        for n in range(min(MAX_NGRAM, len(tokens)), MIN_NGRAM - 1, -1):
            e = self._last.get(tuple(tokens[len(tokens) - n:]))
            if e is not None:
                # The continuation may run into the end of tokens: it then repeats with period
                # len(tokens) - e (an overlapping copy, as in LZ77), so a loop drafts k tokens, not 1.
                drafts: list[int] = []
                for j in range(e, e + k):
                    drafts.append(tokens[j] if j < len(tokens) else drafts[j - len(tokens)])
                return drafts
        return []


class DraftLength:
    """A sequence's draft-model draft length, adapted to its measured acceptance within [1, k_max]:
    one more after a run whose drafts were all accepted, one fewer after a rejection."""

    START = 4

    @staticmethod
    def first(k_max: int) -> int:
        return min(DraftLength.START, k_max)

    @staticmethod
    def next(length: int, drafted: int, accepted: int, k_max: int) -> int:
        if accepted == drafted:
            return min(k_max, max(length, drafted) + 1)
        return max(1, min(length, drafted) - 1)


class Speculator:
    """Proposes drafts for the sequences that may speculate and accepts verified runs (module docstring)."""

    def __init__(self, num_tokens: int, draft=None, draft_max_tokens: int = 8):
        """num_tokens: prompt lookup's K, 0 = off; draft: a DraftModel or None; draft_max_tokens: its k_max."""
        self.num_tokens = num_tokens   # K: drafts per step at most, 0 = off
        self.draft = draft
        self.use_draft = draft is not None   # the draft model drafts (benchmarks turn it off and on)
        self.draft_max_tokens = draft_max_tokens
        self.num_drafted = 0    # draft tokens verified, since start (every source)
        self.num_accepted = 0   # draft tokens accepted, since start
        self.num_model_drafted = 0    # of which the draft model's
        self.num_model_accepted = 0

    @property
    def active(self) -> bool:
        return self.num_tokens > 0 or self.use_draft

    def propose(self, state, k_max: int) -> list[int]:
        """Drafts for one running decode sequence (state: SeqOutputState); k_max: what budget, max_tokens
        and the context window allow (the scheduler's bound)."""
        state.draft_source = None
        if k_max <= 0 or state.matcher is not None or state.reasoning is not None:
            return []
        if self.use_draft:
            if not state.draft_length:
                state.draft_length = DraftLength.first(self.draft_max_tokens)
            drafts = self.draft.propose(state.seq, min(state.draft_length, k_max), state.sampling_row())
            if drafts:
                state.draft_source = "model"
                return drafts
        k = min(self.num_tokens, k_max)
        if k <= 0:
            return []
        if state.lookup is None:
            state.lookup = PromptLookup()
        state.draft_source = "lookup"
        return state.lookup.propose(state.seq.token_ids, k)

    def forget(self, seq_id: int) -> None:
        """A sequence finished or was preempted: the draft model's KV of it goes back to its pool."""
        if self.draft is not None:
            self.draft.release(seq_id)

    def accept(self, state, drafts: list[int], first: int, logits: torch.Tensor, sampler: Sampler,
               ended: bool = False) -> tuple[Termination | None, int]:
        """Continue a verified run after position 0 sampled `first` (already given to state.on_token;
        ended: that token ended the sequence, so nothing more is drawn).

        logits: (k, V), row j the logits after draft j (position j + 1 of the run). Returns (the first
        termination or None, the number of drafts accepted); without a termination that is also the number
        of tokens appended here, and the KV of positions 0..accepted of the run is valid.
        """
        termination, accepted, token = None, 0, first
        for j, draft in enumerate(drafts):
            if ended or token != draft:
                break
            accepted += 1
            result = sampler(logits[j:j + 1], [state.sampling_row()])
            if not result.finite[0]:
                termination = Termination(Reason.ERROR, "model produced NaN/Inf logits")
                break
            token = result.token_ids[0]
            termination = state.on_token(token, _first(result.logprobs))
            if termination is not None:
                break
        self.num_drafted += len(drafts)
        self.num_accepted += accepted
        if state.draft_source == "model":
            self.num_model_drafted += len(drafts)
            self.num_model_accepted += accepted
            state.draft_length = DraftLength.next(state.draft_length, len(drafts), accepted, self.draft_max_tokens)
        state.seq.num_draft_tokens += len(drafts)
        state.seq.num_accepted_draft_tokens += accepted
        return termination, accepted


def _first(logprobs: list[TokenLogprob | None]) -> TokenLogprob | None:
    return logprobs[0]
