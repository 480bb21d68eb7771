"""Black box: `haltwise serve` on SmolLM2 with a ~3k-token prompt restored from RAM and from disk answers
exactly what a server without any prompt cache answers (greedy and seeded), after eviction from a small pool,
after a restart, after a kill -9 during a long prefill and its writes, and with a corrupted, a truncated and
a foreign entry in the directory; the directory never holds more than its budget.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.http_helpers import wait_until
from tests.server.serve_process import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]
LONGTEXT = Path(__file__).resolve().parents[3] / "shared" / "data" / "longtext"   # ../shared beside the repo
DISK_BUDGET = 56 * 2**20          # one ~3k-token prompt (~37 MiB of int8 blocks), not two: evictions happen
COMMON = ["--max-model-len", "4096", "--threads", "2", "--shutdown-grace", "1", "--watchdog", "600"]   # a busy host


def text(name: str, start: int) -> str:
    path = LONGTEXT / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    return path.read_text(errors="replace")[start:start + 11_000]


class Server:
    def __init__(self, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", "--port", str(self.port),
                                      *COMMON, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not wait_until(lambda: self.proc.poll() is not None or self._ready(), 1800) or self.proc.poll() is not None:
            self.proc.kill()
            raise RuntimeError(f"serve did not start:\n{self.proc.communicate()[0][-3000:]}")

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def complete(self, prompt: str, seed: int | None) -> dict:
        body = {"prompt": prompt, "max_tokens": 16, "temperature": 0.0 if seed is None else 0.9, "seed": seed}
        r = httpx.post(self.url + "/v1/completions", json=body, timeout=1200)
        assert r.status_code == 200, r.text
        return r.json()

    def metric(self, name: str) -> float:
        """A sample by its full name with labels, e.g. 'haltwise_prompt_cache_hit_blocks_total{tier="ram"}'."""
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no {name} in /metrics")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out = self.proc.communicate(timeout=120)[0]
        return out

    def kill(self) -> None:
        self.proc.kill()          # SIGKILL
        self.proc.wait()


def answer(body: dict) -> tuple[str, str]:
    choice = body["choices"][0]
    return choice["text"], choice["finish_reason"]


def dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def prompts() -> dict[str, str]:
    return {"P": text("lear_gut.txt", 20_000), "Q": text("tempest_gut.txt", 20_000),
            "R": text("coriolanus_gut.txt", 30_000)}


@pytest.fixture(scope="module")
def reference(prompts) -> dict[tuple[str, int | None], tuple[str, str]]:
    """Answers of a server without any prompt cache (no RAM tier, no directory)."""
    server = Server("--prompt-cache-ram", "0")
    try:
        got = {}
        for name in ("P", "R"):
            for seed in (None, 3):
                body = server.complete(prompts[name], seed)
                assert 2500 < body["usage"]["prompt_tokens"] < 3700, body["usage"]
                got[name, seed] = answer(body)
        return got
    finally:
        server.stop()


def test_ram_tier_after_eviction_from_a_small_pool(prompts, reference):
    pool = 4200 * 12240        # SmolLM2 int8: 12240 bytes a token; one ~3k prompt fits, two do not
    server = Server("--kv-cache-memory", str(pool), "--prompt-cache-ram", "512MiB")
    try:
        for seed in (None, 3):
            first = server.complete(prompts["P"], seed)
            server.complete(prompts["Q"], seed)                       # pushes P's blocks out of the pool
            again = server.complete(prompts["P"], seed)
            tiers = again["usage"]["prompt_cache"]
            assert tiers["ram"] >= 2000, tiers
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == sum(tiers.values())
            assert answer(first) == answer(again) == reference["P", seed]
        assert server.metric('haltwise_prompt_cache_hit_blocks_total{tier="ram"}') > 0
        assert server.metric('haltwise_prompt_cache_used_bytes{tier="ram"}') <= 512 * 2**20
    finally:
        server.stop()


def test_disk_tier_restart_kill9_and_bad_entries(prompts, reference, tmp_path):
    root = tmp_path / "pc"
    disk = ["--prompt-cache-dir", str(root), "--prompt-cache-disk", str(DISK_BUDGET), "--prompt-cache-ram", "0"]
    server = Server(*disk)
    assert answer(server.complete(prompts["P"], None)) == reference["P", None]
    server.stop()                                         # a graceful stop writes what is queued
    assert 0 < dir_bytes(root) <= DISK_BUDGET

    server = Server(*disk)                                # restart: the index is rebuilt from the files
    for seed in (None, 3):
        body = server.complete(prompts["P"], seed)        # from disk, then (restored) from the pool
        tier = "disk" if seed is None else "pool"
        assert body["usage"]["prompt_cache"][tier] >= 2000, body["usage"]
        assert answer(body) == reference["P", seed]

    # kill -9 during a long prefill of R and its writes
    saved = 'haltwise_prompt_cache_saved_bytes_total{tier="disk"}'
    before = server.metric(saved)
    try:
        with httpx.Client(timeout=1200) as client, client.stream(
                "POST", server.url + "/v1/completions",
                json={"prompt": prompts["R"], "max_tokens": 16, "temperature": 0, "stream": True}) as _:
            assert wait_until(lambda: server.metric(saved) > before + 2**20, 600)
            server.kill()
    except httpx.HTTPError:
        pass
    assert dir_bytes(root) <= DISK_BUDGET
    server = Server(*disk)
    assert not list(root.glob("*.tmp")), "a dead process's temp files are removed at start"
    for seed in (None, 3):
        assert answer(server.complete(prompts["R"], seed)) == reference["R", seed]
        assert dir_bytes(root) <= DISK_BUDGET
    server.stop()

    # a corrupted, a truncated and a foreign entry: skipped, removed, counted; answers unchanged
    entries = sorted(root.glob("*.kvb"), key=lambda p: p.stat().st_mtime_ns)
    assert len(entries) >= 12
    # inside R's prompt chain (restored in chain order, so touched in that order), not its decoded blocks
    corrupt, truncated, foreign, donor = entries[-12:-8]
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0x5A
    corrupt.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:-100])
    foreign.write_bytes(donor.read_bytes())
    bad = {p: p.read_bytes() for p in (corrupt, truncated, foreign)}
    server = Server(*disk)
    try:
        for seed in (None, 3):
            assert answer(server.complete(prompts["R"], seed)) == reference["R", seed]
        # none was loaded (the answers above are unchanged); each one the server read was removed and counted,
        # and its block, prefilled again, may be written back good under the same name (which of them a restore
        # reaches varies: tests/engine/prompt_cache/test_disk_tier.py checks each kind of bad entry directly)
        replaced = [p for p, b in bad.items() if not p.exists() or p.read_bytes() != b]
        assert server.metric("haltwise_prompt_cache_corrupt_skipped_total") == len(replaced) > 0, replaced
        assert dir_bytes(root) <= DISK_BUDGET
    finally:
        server.stop()
