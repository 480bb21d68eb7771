"""The KV pool's blocks become usable as their pages are committed (engine/page_commit.py).

A server is ready once the blocks of one longest sequence (and the sliding layers' whole pool) are
committed; the rest of a multi-GB pool commits in the background over the next 1-3 s of idle time (while
requests run, only as far as they need: may_commit). Until a block's
pages are committed the allocator never hands it out (block_allocator.py: make_usable), so no request
touches memory the host may still refuse. If the host refuses a page, the pool ends at the last block
committed before it: the allocator and the admission limit shrink to it, and it is logged.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace

from haltwise.engine.page_commit import PageCommit
from haltwise.engine.scheduler import Scheduler

log = logging.getLogger("haltwise.engine")


class PoolGrowth:
    """Moves committed blocks into the allocator; advance() once per step until it returns False. Paces the
    commit (may_commit): the pages not needed yet are committed while the engine is idle."""

    def __init__(self, commit: PageCommit, scheduler: Scheduler, reserve_blocks: int):
        self.commit, self.scheduler = commit, scheduler
        self.reserve_blocks = reserve_blocks       # committed free blocks kept ready while requests run
        self.started = time.perf_counter()
        commit.pace(self.may_commit)

    def may_commit(self) -> bool:
        """Whether the commit thread may go on now (asked from that thread): while no request runs, or while
        fewer than reserve_blocks committed blocks are free (one longest sequence's: a request that cannot
        start for want of blocks implies fewer). So decoding does not share its cores with the page
        clearing, and a burst that needs the pool's uncommitted part commits it at full speed."""
        scheduler = self.scheduler
        return not scheduler.num_running or scheduler.allocator.num_free_blocks < self.reserve_blocks

    def advance(self) -> bool:
        """Take the blocks committed so far; False once the pool has stopped growing (done or refused)."""
        finished = self.commit.finished              # read first: committed_rows is final once it is set
        allocator = self.scheduler.allocator
        allocator.make_usable(self.commit.committed_rows)
        if not finished:
            return True
        if self.commit.error is not None and allocator.num_usable_blocks < allocator.num_blocks:
            log.error("the host refused the KV pool's pages past block %d of %d (%s): the pool holds %d tokens",
                      allocator.num_usable_blocks, allocator.num_blocks, self.commit.error,
                      allocator.num_usable_blocks * allocator.block_size)
            allocator.shrink_to_usable()
            self.scheduler.policy = replace(self.scheduler.policy, num_blocks=allocator.num_blocks)
        else:
            log.info("KV pool committed: %d blocks usable (%.2fs after the engine was built)",
                     allocator.num_blocks, time.perf_counter() - self.started)
        return False
