"""Helpers for the page tests: `haltwise serve` as a subprocess, Debian's chromium under Playwright,
screenshots kept under out/ui-screenshots/ (gitignored) as artifacts."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.server.http_helpers import metric, wait_until
from tests.server.serve_process import stop_process

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "out" / "ui-screenshots"


def require_browser() -> None:
    """Skip (saying why) where chromium or playwright is genuinely absent; `make test` installs both."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        pytest.skip(f"chromium not found at {CHROMIUM} (`make test` installs it: apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def serve(*args: str, faults: str = "", start_limit: float = 300.0) -> Iterator[str]:
    """Run `haltwise serve ARGS` on a free loopback port; yield its base URL; stop it afterwards.

    faults: HALTWISE_FAULTS for the server (engine/faults.py), e.g. a stall on every step so that a
    fast machine still streams slowly enough for a click to land mid-stream.
    """
    port = _free_port()
    env = {**os.environ, "HALTWISE_FAULTS": faults} if faults else None
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", "--host", "127.0.0.1",
                             "--port", str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        if not wait_until(lambda: proc.poll() is None and _ready(url), start_limit):
            proc.kill()
            raise RuntimeError(f"haltwise serve did not become ready:\n{proc.communicate()[0][-3000:]}")
        yield url
    finally:
        stop_process(proc, 30)


class Browser:
    """One chromium; `open(url)` gives a fresh page whose console errors are collected in `problems`."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=shutil.which("chromium") or CHROMIUM,
                                                args=CHROMIUM_ARGS)
        self.problems: list[str] = []

    def open(self, url: str) -> Any:
        self.problems = []
        # bypass_csp: Playwright's wait_for_function evaluates strings, which the page's CSP (script-src
        # 'self', no eval) forbids; the page's own code never needs eval (test_edge_security checks the header).
        page = self.browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        page.on("console", lambda m: self.problems.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.problems.append(f"pageerror: {e}"))
        page.goto(url)
        page.wait_for_function("document.querySelectorAll('#model-pick option').length > 0")   # the models listed
        return page

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def set_params(page: Any, **fields: Any) -> None:
    """Fill the parameters panel: numbers/text by name, booleans as checkboxes, `stop` as its textarea."""
    for name, value in fields.items():
        sel = "[data-testid=stop]" if name == "stop" else f"#params [name={name}]"
        if isinstance(value, bool):
            page.set_checked(sel, value)
        else:
            page.fill(sel, str(value))


def record_growth(page: Any) -> None:
    """Record the streamed output's length after every DOM change into window.__lengths."""
    page.evaluate("""() => { window.__lengths = [];
        new MutationObserver(() => { const o = document.querySelector('[data-testid=output]');
            if (o) window.__lengths.push(o.textContent.length); })
          .observe(document.getElementById('transcript'), {subtree: true, childList: true, characterData: true}); }""")


def finished(page: Any, limit_ms: int = 120_000) -> str:
    """Wait for the latest answer's termination view; return its text."""
    page.wait_for_selector("[data-testid=termination] .badge", timeout=limit_ms)
    return page.inner_text("[data-testid=termination]")


def running(url: str) -> float:
    return metric(url, "haltwise_requests_running")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test module (skips, saying why, where none can run)."""
    require_browser()
    b = Browser()
    yield b
    b.close()
