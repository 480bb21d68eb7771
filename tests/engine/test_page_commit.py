"""Zero tensors whose pages are committed in a background thread (engine/page_commit.py)."""
import ctypes
import errno
import mmap
import threading

import pytest
import torch

from haltwise.engine import page_commit
from haltwise.engine.page_commit import PageCommit, can_populate_later, committed_zeros


@pytest.mark.parametrize("shape", [(3, 4, 2, 20), (600, 16, 3, 68)])    # 1 KiB (torch.zeros), 2 MiB (a map)
def test_committed_zeros_are_zero_writable_and_resident(shape):
    t = committed_zeros(shape, torch.int8)
    assert t.shape == shape and t.dtype == torch.int8 and t.is_contiguous() and not t.any()
    t[-1, -1, -1, -1] = 7
    assert t.sum() == 7
    before = _rss()
    u = committed_zeros(shape, torch.bfloat16)   # committed at once: the resident set grows by its bytes now
    assert u.float().abs().sum() == 0 and (shape[0] < 600 or _rss() - before >= u.numel() * 2 * 0.9)


def test_regions_are_usable_at_once_and_resident_once_waited_for():
    commit = PageCommit()
    shapes = [(64, 16, 4, 1024), (32, 16, 2, 68), (2, 3)]           # 4 MiB, 68 KiB... (torch.zeros), 6 bytes
    tensors = [commit.zeros(shape, torch.int8) for shape in shapes]
    mapped = tensors[0].numel()
    before = _rss()
    commit.start()
    tensors[0][5, 3, 1, 7] = 9                   # written while the thread may still be committing it
    commit.wait()
    grown = _rss() - before
    assert [t.shape for t in tensors] == [torch.Size(s) for s in shapes]
    assert int(tensors[0].sum()) == 9 and not tensors[1].any() and not tensors[2].any()
    if can_populate_later():                     # else zeros() populated the map when it made it
        assert grown >= 0.9 * mapped, (grown, mapped)
    commit.wait()                                # idempotent


def test_a_refused_commit_fails_the_wait_with_memory_error(monkeypatch):
    if not can_populate_later():
        pytest.skip("madvise(MADV_POPULATE_WRITE) is unavailable on this kernel: regions are populated when mapped")

    def refuse(address, length, advice):
        ctypes.set_errno(errno.ENOMEM)
        return -1

    monkeypatch.setattr(page_commit, "_madvise", refuse)
    commit = PageCommit()
    commit.zeros((4, 2**20), torch.int8)
    commit.start()
    with pytest.raises(MemoryError, match="commit the KV pool"):
        commit.wait()


def test_pages_are_committed_a_chunk_per_call_covering_each_region(monkeypatch):
    """madvise holds the mmap lock while it populates: each call covers at most COMMIT_CHUNK_BYTES, so a
    map made by another thread (every large numpy or torch array) waits for one chunk, not the pool."""
    if not can_populate_later():
        pytest.skip("madvise(MADV_POPULATE_WRITE) is unavailable on this kernel: regions are populated when mapped")
    calls = []
    real = page_commit._madvise

    def record(address, length, advice):
        calls.append((address, length))
        return real(address, length, advice)

    monkeypatch.setattr(page_commit, "_madvise", record)
    commit = PageCommit()
    chunk = page_commit.COMMIT_CHUNK_BYTES
    regions = [commit.zeros((n,), torch.int8) for n in (3 * chunk + 4096, 2 * chunk)]
    commit.start()
    commit.wait()
    assert all(length <= chunk + mmap.PAGESIZE for _, length in calls)
    for region in regions:
        start, end = region.data_ptr(), region.data_ptr() + region.numel()
        covered = sorted((a, a + n) for a, n in calls if start <= a < end)
        assert covered[0][0] == start and covered[-1][1] == end
        assert all(a == b for (_, b), (a, _) in zip(covered, covered[1:]))      # no gap, no overlap
    assert len(calls) == 4 + 2


def gated_madvise(monkeypatch, calls_before_gate: int, refuse: bool = False):
    """_madvise that lets `calls_before_gate` calls through, then blocks (or refuses with ENOMEM)
    until the returned event is set."""
    gate, calls, real = threading.Event(), [], page_commit._madvise

    def gated(address, length, advice):
        calls.append((address, length))
        if len(calls) > calls_before_gate:
            if refuse:
                ctypes.set_errno(errno.ENOMEM)
                return -1
            gate.wait()
        return real(address, length, advice)

    monkeypatch.setattr(page_commit, "_madvise", gated)
    return gate, calls


def test_wait_for_rows_returns_once_every_region_has_those_rows(monkeypatch):
    """Rows are committed round by round across the regions: waiting for the first rows does not wait for
    the rest, and the calls made by then cover those rows of every region (the longer ones' too)."""
    if not can_populate_later():
        pytest.skip("madvise(MADV_POPULATE_WRITE) is unavailable on this kernel: regions are populated when mapped")
    chunk = page_commit.COMMIT_CHUNK_BYTES
    row = 3 * 1000                                          # bytes per row, not a page multiple
    gate, calls = gated_madvise(monkeypatch, calls_before_gate=3)  # round 1 of three regions, then held
    commit = PageCommit()
    regions = [commit.zeros((n, row), torch.int8) for n in (1000, 400, 833)]
    per_round = chunk // row
    commit.start()
    commit.wait(rows=per_round)                             # returns while round 2 is held at the gate
    assert not commit.finished and commit.committed_rows == per_round
    for region in regions:
        covered = sum(n for a, n in calls[:3] if region.data_ptr() <= a < region.data_ptr() + region.numel())
        assert covered >= min(per_round, region.shape[0]) * row
    gate.set()
    commit.wait()
    assert commit.finished and commit.committed_rows >= max(r.shape[0] for r in regions) and commit.error is None


def test_a_finished_commit_counts_every_row_of_every_region_committed():
    """Once done without error every row is committed, whatever regions it had: none mapped (all small, from
    torch.zeros) or small ones longer than the mapped ones."""
    for shapes in ([(10, 1000)], [(4000, 100), (2, 2**20)]):     # 10 KB; 400 KB (small) + 2 MiB of 2 rows
        commit = PageCommit()
        for shape in shapes:
            commit.zeros(shape, torch.int8)
        commit.start()
        commit.wait()
        assert commit.finished and commit.error is None
        assert commit.committed_rows >= max(rows for rows, _ in shapes)


def test_a_refused_round_keeps_the_rows_before_it(monkeypatch):
    if not can_populate_later():
        pytest.skip("madvise(MADV_POPULATE_WRITE) is unavailable on this kernel: regions are populated when mapped")
    gated_madvise(monkeypatch, calls_before_gate=2, refuse=True)
    commit = PageCommit()
    for _ in range(2):
        commit.zeros((3, 2**20), torch.int8)
    commit.start()
    commit.wait(rows=1)                                     # round 1 went through
    with pytest.raises(MemoryError, match="commit the KV pool"):
        commit.wait(rows=2)
    with pytest.raises(MemoryError):
        commit.wait()
    assert commit.finished and commit.committed_rows == 1 and commit.error.errno == errno.ENOMEM


def _rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_a_paced_commit_commits_no_round_until_it_may_go_on(monkeypatch):
    """pace(): the thread asks before each round and waits while told no; told yes, it finishes."""
    if not can_populate_later():
        pytest.skip("madvise(MADV_POPULATE_WRITE) is unavailable on this kernel: regions are populated when mapped")
    monkeypatch.setattr(page_commit, "PACE_POLL_S", 0.001)
    gate, _ = gated_madvise(monkeypatch, calls_before_gate=2)   # round 1 of two regions, then held
    commit = PageCommit()
    regions = [commit.zeros((n, 3000), torch.int8) for n in (1000, 700)]
    per_round = page_commit.COMMIT_CHUNK_BYTES // 3000
    asked, allowed = threading.Semaphore(0), threading.Event()

    def may_go_on() -> bool:
        asked.release()
        return allowed.is_set()

    commit.start()
    commit.wait(rows=per_round)                             # round 1 done; round 2 held at the madvise gate
    commit.pace(may_go_on)
    gate.set()                                              # round 2 finishes, round 3 must ask first
    for _ in range(5):
        assert asked.acquire(timeout=60)
    assert commit.committed_rows == 2 * per_round and not commit.finished
    allowed.set()
    commit.wait()
    assert commit.finished and commit.committed_rows >= max(r.shape[0] for r in regions)
