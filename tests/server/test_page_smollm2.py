"""The playground page with the real SmolLM2-135M-Instruct behind `haltwise serve`: what a random model
cannot show (a stop string's cut, a real loop), plus streaming and cancel on a real-speed model."""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.server.browser_helpers import (Browser, browser, finished, record_growth, require_browser, running, serve,
                                          set_params, shot)
from tests.server.http_helpers import wait_until

pytestmark = pytest.mark.slow  # loading the GGUF and greedy decoding on a shared 2-core machine


@pytest.fixture(scope="module")
def smol_url(browser: Browser) -> Iterator[str]:
    yield from serve("--dtype", "float32", "--kv-cache-memory", "128MiB", "--max-model-len", "2048")


def test_stop_string_is_cut_and_shown(browser: Browser, smol_url: str) -> None:
    page = browser.open(smol_url)
    set_params(page, temperature=0, max_tokens=100, stop=".")
    page.fill("[data-testid=prompt]", "Write three short sentences about the sea.")
    record_growth(page)
    page.click("[data-testid=send]")
    page.wait_for_function("document.querySelector('[data-testid=output]')?.textContent.length > 0",
                           timeout=120_000)
    shot(page, "07-streaming")
    view = finished(page, 300_000)
    answer = page.inner_text("[data-testid=output]")
    lengths = page.evaluate("window.__lengths")
    assert len(set(x for x in lengths if x > 0)) >= 3 and lengths == sorted(lengths), lengths
    assert answer and "." not in answer
    assert "stop_string" in view and "layer business" in view and 'stop string "."' in view
    cut = page.inner_text("[data-testid=termination] .cut")
    assert page.inner_text("[data-testid=termination] .cut del") == "."   # the cut, struck through
    assert cut.endswith(answer[-20:] + ".")                               # right after the answer's end
    assert f"matched at char {len(answer)};" in view                      # char_offset = the answer's length
    assert browser.problems == []
    shot(page, "08-stop-string")
    page.close()


def test_repetition_span_is_highlighted(browser: Browser, smol_url: str) -> None:
    page = browser.open(smol_url)
    page.click("[data-mode=completion]")
    set_params(page, temperature=0, max_tokens=100)
    page.fill("[data-testid=prompt]", "1 1 1 1 1 1 1 1 1 1")
    page.click("[data-testid=send]")
    view = finished(page, 300_000)
    answer = page.inner_text("[data-testid=output]")
    assert "repetition" in view and "layer rule" in view and "period 2 repeated" in view
    loop = page.inner_text("[data-testid=termination] mark.loop")
    assert loop and answer.endswith(loop.strip()) and loop.count("1") >= 4
    shot(page, "09-repetition")
    page.close()


def test_cancel_frees_the_request(browser: Browser, smol_url: str) -> None:
    page = browser.open(smol_url)
    set_params(page, temperature=0, max_tokens=300, ignore_eos=True)
    page.fill("[data-testid=prompt]", "Tell me a long story about a lighthouse keeper.")
    page.click("[data-testid=send]")
    page.wait_for_function("document.querySelector('[data-testid=output]')?.textContent.length > 0",
                           timeout=120_000)
    page.click("[data-testid=cancel]")
    assert "cancelled" in finished(page, 10_000)
    assert wait_until(lambda: running(smol_url) == 0, 30), "the aborted request is still running"
    page.wait_for_function("document.querySelector('[data-testid=metric-running]').textContent === '0'")
    shot(page, "10-cancelled-smollm2")
    page.close()
