"""DiskTier: budget and LRU (hypothesis), rebuild from files, and every bad entry skipped and removed."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.engine.prompt_cache import entry_file
from haltwise.engine.prompt_cache.disk_tier import DiskTier, UntrustedCacheDir

NS = b"n" * 32
HEADER = entry_file.HEADER_BYTES


def key(k: int) -> tuple[bytes, bytes]:
    return NS, bytes([k]) * 16


def dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.iterdir() if p.is_file())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(0, 6 * (HEADER + 40)),
       ops=st.lists(st.tuples(st.sampled_from(["save", "load"]), st.integers(0, 7), st.integers(1, 40)),
                    max_size=30))
def test_lru_and_budget_match_a_model(tmp_path_factory, budget, ops):
    root = tmp_path_factory.mktemp("pc")
    tier = DiskTier(root, budget)
    model: list[tuple[int, int]] = []      # (key, file size), least recently used first
    for op, k, size in ops:
        if op == "save":
            tier.save(key(k), bytes([k]) * size)
            tier.flush()
            if k not in dict(model) and HEADER + size <= budget:
                while sum(s for _, s in model) + HEADER + size > budget:
                    model.pop(0)
                model.append((k, HEADER + size))
        else:
            payload = tier.load(key(k))
            held = dict(model)
            assert (payload is not None) == (k in held)
            if payload is not None:
                model = [(mk, ms) for mk, ms in model if mk != k] + [(k, held[k])]
        assert tier.used_bytes == sum(s for _, s in model) == dir_bytes(root) <= budget
    rebuilt = DiskTier(root, budget)      # the index is rebuilt from the files, oldest access first
    assert rebuilt.used_bytes == tier.used_bytes and len(rebuilt) == len(model)


def test_restart_reads_what_was_written_and_a_smaller_budget_evicts(tmp_path):
    tier = DiskTier(tmp_path, 10_000)
    for k in range(5):
        tier.save(key(k), bytes([k]) * 100)
    tier.flush()
    again = DiskTier(tmp_path, 10_000)
    assert [again.load(key(k)) for k in range(5)] == [bytes([k]) * 100 for k in range(5)]
    small = DiskTier(tmp_path, 2 * (HEADER + 100))
    assert len(small) == 2 and dir_bytes(tmp_path) <= 2 * (HEADER + 100)


WHY = {"corrupt": "corrupt: checksum", "truncated": "truncated:", "foreign": "foreign:",
       "other_key_in_header": "foreign:"}


def _one_entry(tmp_path: Path) -> tuple[DiskTier, Path]:
    tier = DiskTier(tmp_path, 10_000)
    tier.save(key(1), b"\x01" * 100)
    tier.flush()
    return tier, tmp_path / entry_file.entry_name(*key(1))


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "foreign", "other_key_in_header"])
def test_bad_entries_are_never_loaded_and_are_removed(tmp_path, damage, caplog):
    tier, path = _one_entry(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "corrupt":
        data[-1] ^= 0xFF
    elif damage == "truncated":
        data = data[:-10]
    elif damage == "foreign":              # a whole, valid entry of another key under this key's name
        data = bytearray(entry_file.encode(NS, b"\x02" * 16, b"\x01" * 100))
    else:                                   # another key's header, this key's checksum
        data[40:56] = b"\x02" * 16
    path.write_bytes(bytes(data))
    # both at load (the index says it is there) and at the next start
    assert tier.load(key(1)) is None
    assert not path.exists() and tier.stats.corrupt_skipped == 1 and "removing entry" in caplog.text
    assert WHY[damage] in caplog.text      # each damage caught by its own check
    path.write_bytes(bytes(data))
    restarted = DiskTier(tmp_path, 10_000)
    assert restarted.load(key(1)) is None and not path.exists() and restarted.stats.corrupt_skipped == 1


def test_untrusted_directory_and_file_are_refused(tmp_path):
    root = tmp_path / "open"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(UntrustedCacheDir):
        DiskTier(root, 1000)
    tier, path = _one_entry(tmp_path / "ours")
    path.chmod(0o666)
    assert tier.load(key(1)) is None and not path.exists() and tier.stats.untrusted_skipped == 1


def test_a_full_queue_drops_and_counts_never_blocks(tmp_path):
    tier = DiskTier(tmp_path, 10**9, queue_blocks=1)
    for k in range(200):
        tier.save(key(k % 256), bytes(50_000))
    tier.flush()
    assert tier.stats.write_drops > 0
    assert len(tier) + tier.stats.write_drops == 200


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path):
    stale = tmp_path / f".x.kvb.{2**22 + 12345}.tmp"     # no such pid
    stale.write_bytes(b"half")
    DiskTier(tmp_path, 1000)
    assert not stale.exists()
