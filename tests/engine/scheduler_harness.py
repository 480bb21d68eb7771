"""Harness for the scheduler tests.

A fake runner stands in for the model: it writes each scheduled token into a shadow KV store at
the slot the block table names, and "samples" a token that is a deterministic function of the
context it READS BACK from that store. A wrong block table, a corrupted shared block or a wrong
recompute after preemption therefore changes the output, which is compared to a direct reference.
"""
from __future__ import annotations

import itertools

from haltwise.config import EngineConfig
from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.scheduler import Scheduler
from haltwise.engine.scheduler_output import SchedulerOutput
from haltwise.engine.sequence import Sequence, SequenceStatus
from haltwise.sampling_params import SamplingParams
from haltwise.stopping.termination import Reason, Termination

_ids = itertools.count()
WINDOW = 4096


def next_token(context: list[int]) -> int:
    """The fake model: any change in the context changes the token (almost surely)."""
    acc = 7
    for t in context:
        acc = (acc * 1_000_003 + t) % 2_147_483_647
    return acc % 50_000


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(next_token(tokens))
    return tokens[len(prompt):]


def make_seq(prompt: list[int], max_tokens: int | None = 8, request_id: str | None = None) -> Sequence:
    sid = next(_ids)
    return Sequence(seq_id=sid, request_id=request_id or f"req-{sid}", prompt_token_ids=list(prompt),
                    params=SamplingParams(max_tokens=max_tokens), max_total_tokens=WINDOW)


def make(num_blocks: int = 64, block_size: int = 4, caching: bool = True, **cfg) -> Scheduler:
    config = EngineConfig(block_size=block_size, enable_prefix_caching=caching, **cfg)
    return Scheduler(config, BlockAllocator(num_blocks, block_size, caching), max_model_len=WINDOW)


class FakeRunner:
    def __init__(self, sched: Scheduler):
        self.sched = sched
        self.kv: dict[int, int] = {}   # slot -> token id written there
        self.steps: list[SchedulerOutput] = []
        self.running_before: list[list[Sequence]] = []

    def step(self) -> SchedulerOutput:
        """schedule -> compute -> after_step -> append sampled tokens -> finish at max_tokens."""
        sched, alloc = self.sched, self.sched.allocator
        self.running_before.append(list(sched.running))
        decoding = [s for s in sched.running if s.num_uncomputed_tokens == 1]
        out = sched.schedule()
        self.check(out)
        starved = {id(s) for s in decoding} - {id(s.seq) for s in out.scheduled} - {id(s) for s in out.preempted}
        assert not starved, "a running decode was left out of a step"
        for s in out.scheduled:
            for p in range(s.start, s.start + s.num_new_tokens):
                self.kv[alloc.slot(s.seq, p)] = s.seq.token_ids[p]
        sampled = {}
        for s in out.scheduled:
            if s.samples:
                context = [self.kv[alloc.slot(s.seq, p)] for p in range(s.seq.num_tokens)]
                sampled[s.seq.seq_id] = next_token(context)
        sched.after_step(out)
        for s in out.scheduled:
            if s.samples:
                s.seq.append_token(sampled[s.seq.seq_id])
                if s.seq.num_output_tokens == s.seq.params.max_tokens:
                    sched.finish(s.seq, Termination(Reason.MAX_TOKENS))
        self.steps.append(out)
        return out

    def check(self, out: SchedulerOutput) -> None:
        cfg = self.sched.config
        seqs = [s.seq for s in out.scheduled]
        assert len(seqs) == len(set(map(id, seqs))), "a sequence scheduled twice in one step"
        assert len(seqs) <= cfg.max_num_seqs and self.sched.num_running <= cfg.max_num_seqs
        assert out.num_batched_tokens == sum(s.num_new_tokens for s in out.scheduled)
        alone = len(out.scheduled) == 1 and not cfg.enable_chunked_prefill
        assert out.num_batched_tokens <= cfg.max_num_batched_tokens or alone
        for s in out.scheduled:
            assert s.seq.status == SequenceStatus.RUNNING and s.num_new_tokens >= 1
            assert s.start + s.num_new_tokens <= s.seq.num_tokens
            assert len(s.seq.block_table) * self.sched.allocator.block_size >= s.start + s.num_new_tokens
        assert not set(map(id, out.preempted)) & set(map(id, seqs))

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.sched.has_unfinished():
                return
            self.step()
        raise AssertionError("scheduler did not drain")


def assert_all_free(sched: Scheduler) -> None:
    alloc = sched.allocator
    assert alloc.num_free_blocks == alloc.num_blocks and alloc.num_live_seqs == 0
    assert not sched.has_unfinished()

