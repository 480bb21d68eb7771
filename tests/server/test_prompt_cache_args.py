"""`haltwise serve` prompt-cache options: what it prints at start, what it refuses."""
from __future__ import annotations

import argparse
import os

import pytest

from haltwise.engine.prompt_cache.settings import RAM_DEFAULT_CAP, default_ram_bytes
from haltwise.server import prompt_cache_args
from tests.server.serve_process import ServeProcess, run_serve


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    prompt_cache_args.add_arguments(parser)
    parser.add_argument("--replicas", type=int, default=None)
    return parser.parse_args(argv)


def test_defaults_ram_on_bounded_by_available_disk_off():
    s = prompt_cache_args.settings_from(parse())
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < s.ram_bytes <= min(RAM_DEFAULT_CAP, 0.2 * total) and s.dir is None   # MemAvailable moves
    assert default_ram_bytes(available=2**30) == int(0.2 * 2**30)
    assert default_ram_bytes(available=2**40) == RAM_DEFAULT_CAP


def test_sizes_zero_and_prefix_caching_off(tmp_path):
    s = prompt_cache_args.settings_from(parse("--prompt-cache-ram", "0", "--prompt-cache-dir", str(tmp_path),
                                              "--prompt-cache-disk", "64MiB", "--replicas", "2"))
    assert (s.ram_bytes, s.disk_bytes, s.replicas) == (0, 64 * 2**20, 2)
    assert prompt_cache_args.settings_from(parse(), no_prefix_caching=True).ram_bytes == 0
    with pytest.raises(SystemExit):
        prompt_cache_args.settings_from(parse("--prompt-cache-ram", "lots"))


def test_replicas_claim_their_own_directories_and_share_the_budget(tmp_path):
    from haltwise.engine.prompt_cache.settings import PromptCacheSettings

    s = PromptCacheSettings(100 * 2**20, str(tmp_path), 64 * 2**20, replicas=2)
    first, second = s.open(), s.open()      # one process here: each open claims the next free slot
    assert first.disk.root != second.disk.root and first.disk.root.parent == tmp_path
    assert first.disk.budget_bytes == 32 * 2**20 and first.ram.budget_bytes == 50 * 2**20


def test_serve_prints_the_budget_and_refuses_an_untrusted_dir(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    done = run_serve(["--prompt-cache-dir", str(open_dir)])
    assert done.returncode == 2 and "writable by its group or by everyone" in done.stderr
    with ServeProcess(["--prompt-cache-ram", "64MiB", "--prompt-cache-dir", str(tmp_path / "ok"),
                       "--prompt-cache-disk", "32MiB"]) as s:
        pass
    assert "prompt cache: RAM 0.06 GiB, disk 0.03 GiB in" in s.output()
