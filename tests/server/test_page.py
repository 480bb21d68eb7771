"""The playground page (server/page.py + server/ui/) in headless chromium against `haltwise serve --tiny`.

Screenshots of each state are kept in out/ui-screenshots/ (see browser_helpers).
"""
from __future__ import annotations

import argparse
import contextlib
import json
from typing import Iterator

import httpx
import pytest

from haltwise.server.app import build_app
from haltwise.server.serve import add_arguments
from tests.server.browser_helpers import (Browser, browser, finished, record_growth, require_browser, running, serve,
                                          set_params, shot)
from tests.server.http_helpers import ServerThread, tiny_engine, wait_until

UI_FILES = ("/", "/ui/style.css", "/ui/app.js", "/ui/sse.js", "/ui/params.js", "/ui/termination.js",
            "/ui/metrics.js")


# At least 4 ms per engine step (at most 250 tokens/s): cancel and timeout land mid-stream on any machine.
PACED = "stall@1-100000:0.004"


@pytest.fixture(scope="module")
def tiny_url() -> Iterator[str]:
    yield from serve("--tiny", "--served-model-name", "tiny", "--threads", "1", "--kv-cache-memory", "16MiB",
                     faults=PACED)


# ---- without a browser -------------------------------------------------------------------------
def test_page_and_assets_are_served_small_and_offline(tiny_url: str) -> None:
    total = 0
    for path in UI_FILES:
        r = httpx.get(tiny_url + path)
        assert r.status_code == 200, path
        assert "http://" not in r.text and "https://" not in r.text, f"{path} must not load anything remote"
        total += len(r.content)
    assert "text/html" in httpx.get(tiny_url + "/").headers["content-type"]
    assert "javascript" in httpx.get(tiny_url + "/ui/app.js").headers["content-type"]
    assert total < 64 * 1024, f"page weight {total} bytes"
    assert "/" not in httpx.get(tiny_url + "/openapi.json").json()["paths"]


def test_no_ui_turns_the_page_off() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--no-ui"]).no_ui and not parser.parse_args([]).no_ui
    with ServerThread(build_app(tiny_engine(), "tiny", ui=False)) as server:
        assert httpx.get(server.url + "/").status_code == 404
        assert httpx.get(server.url + "/ui/app.js").status_code == 404
        assert httpx.get(server.url + "/health").status_code == 200


# ---- in the browser ----------------------------------------------------------------------------
def test_page_loads_without_console_errors(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    page.wait_for_function("document.getElementById('metrics-age').textContent === 'live'")
    assert page.input_value("[data-testid=model]") == "tiny" and "window 512 tokens" in page.inner_text("#model")
    assert page.inner_text("[data-testid=metric-running]") == "0"
    shot(page, "01-loaded")
    assert browser.problems == []
    page.close()


def test_completion_streams_and_the_view_names_the_reason(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    page.click("[data-mode=completion]")
    set_params(page, max_tokens=200, ignore_eos=True, loops=False, temperature=0.8, seed=1)
    page.fill("[data-testid=prompt]", "once upon a time")
    record_growth(page)
    page.click("[data-testid=send]")
    view = finished(page)
    lengths = page.evaluate("window.__lengths")
    grew = sorted(set(x for x in lengths if x > 0))
    assert len(grew) >= 3 and lengths == sorted(lengths), lengths  # it arrived in pieces, only growing
    assert "max_tokens" in view and "layer engine" in view
    assert "200 tokens of max_tokens 200" in view
    assert page.inner_text("[data-testid=output]")
    page.wait_for_function("document.querySelector('[data-testid=metric-running]').textContent === '0'")
    shot(page, "02-max-tokens")
    assert browser.problems == []
    page.close()


def test_timeout_is_explained(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    set_params(page, max_tokens=400, ignore_eos=True, loops=False, timeout=0.3)
    page.fill("[data-testid=prompt]", "tell me a long story")
    page.click("[data-testid=send]")
    view = finished(page)
    assert "timeout" in view and "layer system" in view and "deadline" in view and '"length"' in view
    page.wait_for_function("document.querySelector('[data-testid=metric-running]').textContent === '0'")
    shot(page, "03-timeout")
    page.close()


def test_cancel_ends_the_stream_and_frees_the_request(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    set_params(page, max_tokens=480, ignore_eos=True, loops=False)
    page.fill("[data-testid=prompt]", "count to a thousand")
    page.click("[data-testid=send]")
    page.wait_for_function("document.querySelector('[data-testid=output]')?.textContent.length > 0")
    assert not page.is_disabled("[data-testid=cancel]")
    page.click("[data-testid=cancel]")
    view = finished(page, 10_000)
    assert "cancelled" in view and "You cancelled" in view
    assert page.is_disabled("[data-testid=cancel]") and not page.is_disabled("[data-testid=send]")
    assert wait_until(lambda: running(tiny_url) == 0, 30), "the aborted request is still running"
    page.wait_for_function("document.querySelector('[data-testid=metric-running]').textContent === '0'")
    page.wait_for_function("document.querySelector('#m-reasons [data-reason=cancelled]') !== null")
    shot(page, "04-cancelled")
    page.close()


def test_rejected_request_shows_the_400_and_response_format_is_sent(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    page.select_option("#params [name=response_format]", "json_schema")
    set_params(page, temperature=5)
    bodies: list[dict] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data)) if r.method == "POST" else None)
    page.fill("[data-testid=prompt]", "hello")
    page.click("[data-testid=send]")
    view = finished(page)
    assert "rejected" in view and "HTTP 400" in view and "temperature" in view
    assert bodies[0]["response_format"]["type"] == "json_schema"
    assert bodies[0]["response_format"]["json_schema"]["schema"]["required"] == ["answer"]
    assert "unanswered" in page.get_attribute(".turn.user", "class")
    shot(page, "05-rejected")
    page.close()


def test_api_key_page_loads_and_asks_for_the_key(browser: Browser) -> None:
    with ServerThread(build_app(tiny_engine(), "tiny", api_key="s3cret")) as server:
        assert httpx.get(server.url + "/").status_code == 200            # the page itself is public
        assert httpx.get(server.url + "/v1/models").status_code == 401   # its API calls are not
        page = browser.browser.new_page(bypass_csp=True)
        page.goto(server.url)
        page.wait_for_selector("#notice:not([hidden])")
        assert "API key" in page.inner_text("#notice")
        shot(page, "06-needs-key")
        page.fill("#api-key", "s3cret")
        page.press("#api-key", "Enter")
        page.wait_for_function("document.getElementById('model').textContent.includes('window')")
        set_params(page, max_tokens=5, ignore_eos=True)
        page.fill("[data-testid=prompt]", "hi")
        page.click("[data-testid=send]")
        assert "max_tokens" in finished(page)
        page.close()


def test_page_helpers(browser: Browser, tiny_url: str) -> None:
    """The page's pure functions: stop-string parsing, loop location, Prometheus parsing."""
    page = browser.open(tiny_url)
    got = page.evaluate("""async () => {
        const p = await import('/ui/params.js'), t = await import('/ui/termination.js'),
              m = await import('/ui/metrics.js');
        return {
          commas: p.parseStops('., END ,\\\\n'), lines: p.parseStops('a, b\\nc'), escaped: p.parseStops('x\\\\,y'),
          empty: p.parseStops(''), spaces: p.parseStops('  '), gaps: p.parseStops('a\\n\\nb\\n'),
          loop: t.repeatingSpan('intro: ab ab ab ab ab', 4), none: t.repeatingSpan('abcdef', 4),
          prom: m.parsePrometheus('# HELP x\\nhaltwise_requests_finished_total{finish_reason="stop",termination_reason="eos"} 3.0\\nup 1'),
        }; }""")
    assert got["commas"] == [".", "END", "\n"]
    assert got["lines"] == ["a, b", "c"]
    assert got["escaped"] == ["x,y"] and got["empty"] == []
    assert got["spaces"] == ["  "] and got["gaps"] == ["a", "b"]   # one line without commas: verbatim
    assert got["loop"] == {"start": 6, "period": 3}   # " ab" x5, from the space after "intro:"
    assert got["none"] is None
    assert got["prom"][0] == {"name": "haltwise_requests_finished_total", "value": 3,
                              "labels": {"finish_reason": "stop", "termination_reason": "eos"}}
    assert got["prom"][1]["name"] == "up"
    page.close()


def test_stop_string_kept_in_output_is_marked_not_struck(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    page.click("[data-mode=completion]")
    set_params(page, max_tokens=200, ignore_eos=True, loops=False, temperature=0.8, seed=1, stop=" ",
               include_stop_str_in_output=True)
    page.fill("[data-testid=prompt]", "once upon a time")
    page.click("[data-testid=send]")
    view = finished(page)
    answer = page.text_content("[data-testid=output]")
    assert "stop_string" in view and "kept at the end" in view
    assert answer.endswith(" ") and answer.count(" ") == 1        # the earliest space, kept
    assert page.text_content("[data-testid=termination] mark.kept") == " "
    assert page.query_selector("[data-testid=termination] del") is None
    page.close()


# Synthetic final states for the renderer: every reason a user can meet, drawn side by side.
GALLERY = [
    ("Hello there!", {"reason": "eos", "layer": "model", "detail": "eos token 2 at token 3", "token_index": 3,
                      "char_offset": 12, "finish_reason": "stop", "stop_reason": None}, {}, "del", "⟨eos⟩"),
    ("first line", {"reason": "stop_string", "layer": "business", "detail": "stop preset line at char 10",
                    "token_index": 2, "char_offset": 10, "finish_reason": "stop", "stop_reason": "line"},
     {}, "del", "⏎"),
    ('{"a": 1}', {"reason": "stop_string", "layer": "business", "detail": "stop preset json at char 0",
                  "token_index": 5, "char_offset": 8, "finish_reason": "stop", "stop_reason": "json"},
     {}, ".edge", "┃"),
    ("Answer: 42 END", {"reason": "stop_string", "layer": "business", "detail": 'stop string "END" at char 11',
                        "token_index": 6, "char_offset": 14, "finish_reason": "stop", "stop_reason": "END"},
     {"include_stop_str_in_output": True}, "mark.kept", "END"),
    ("abc", {"reason": "stop_token", "layer": "business", "detail": "stop token 7 at token 2", "token_index": 2,
             "char_offset": 3, "finish_reason": "stop", "stop_reason": 7}, {}, "del", "⟨token 7⟩"),
    ("so it goes", {"reason": "context_limit", "layer": "engine", "token_index": 11, "char_offset": 10,
                    "detail": "context window 512 reached (500 prompt + 12 output tokens)",
                    "finish_reason": "length", "stop_reason": None}, {}, ".edge.limit", "cut after token #11"),
    ("slow", {"reason": "timeout", "layer": "system", "detail": "deadline of 0.5s passed", "token_index": 1,
              "char_offset": 4, "finish_reason": "length", "stop_reason": None}, {}, ".edge.limit", "deadline"),
]
STREAM_ERRORS = [
    {"source": "stream-error", "reason": "error", "layer": "system", "detail": "generation failed: boom"},
    {"source": "stream-error", "reason": "cancelled", "layer": "system",
     "detail": "request cancelled by the server: server shutting down"},
]


def test_every_reason_has_a_view(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    cases = [{"text": t, "end": {"source": "server", **e}, "body": {"max_tokens": 64, **b}} for t, e, b, *_ in GALLERY]
    cases += [{"text": "partial", "end": e, "body": {}} for e in STREAM_ERRORS]
    views = page.evaluate("""async (cases) => {
        const t = await import('/ui/termination.js');
        const box = document.getElementById('transcript');
        box.replaceChildren();
        return cases.map((c) => {
          const turn = document.createElement('div'), out = document.createElement('div'),
                term = document.createElement('div');
          turn.className = 'turn answer'; out.className = 'output'; out.textContent = c.text;
          turn.append(out, term); box.append(turn);
          t.renderTermination(term, c.end, {text: c.text, body: c.body, window: 512,
                                            usage: {prompt_tokens: 500, completion_tokens: 12}, timing: null});
          return {text: term.innerText, html: term.innerHTML, out: out.textContent};
        }); }""", cases)
    for (text, end, _, selector, marker), view in zip(GALLERY, views):
        assert end["reason"] in view["text"] and f"layer {end['layer']}" in view["text"]
        assert view["out"] == text                          # the view never writes into the answer
        assert marker in view["text"], (end["reason"], view["text"])
    assert "error event" in views[-2]["text"] and "boom" in views[-2]["text"]
    assert "cancelled" in views[-1]["text"] and "shutting down" in views[-1]["text"]
    for i, sel in enumerate(s for *_, s, _ in GALLERY):
        assert page.query_selector(f"#transcript .turn:nth-child({i + 1}) {sel}") is not None, sel
    shot(page, "11-every-reason")
    page.close()


def test_chat_is_multi_turn(browser: Browser, tiny_url: str) -> None:
    page = browser.open(tiny_url)
    bodies: list[dict] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data)) if r.method == "POST" else None)
    set_params(page, max_tokens=8, ignore_eos=True)
    page.fill("#system", "You are terse.")
    for i, question in enumerate(("first question", "second question")):
        page.fill("[data-testid=prompt]", question)
        page.press("[data-testid=prompt]", "Enter")
        page.wait_for_selector(f".turn.answer:nth-of-type({2 * i + 2}) .termination .badge")
    first_answer = page.text_content(".turn.answer .output")
    assert [m["role"] for m in bodies[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert bodies[1]["messages"][2]["content"] == first_answer and bodies[1]["stream"] is True
    assert page.locator("[data-testid=output]").count() == 1   # the hooks follow the latest answer
    page.click("#clear")
    assert page.locator(".turn").count() == 0
    page.close()


def test_engine_failure_mid_stream_is_explained(browser: Browser) -> None:
    """A real engine failure (an injected exception on the 5th model step) ends the stream with an error event."""
    with contextlib.contextmanager(serve)("--tiny", "--served-model-name", "tiny", "--threads", "1",
                                          "--kv-cache-memory", "16MiB", faults=f"{PACED};raise@5") as url:
        page = browser.open(url)
        set_params(page, max_tokens=100, ignore_eos=True, loops=False)
        page.fill("[data-testid=prompt]", "hello")
        page.click("[data-testid=send]")
        view = finished(page)
        assert "error" in view and "layer system" in view and "error event" in view, view
        assert "injected failure" in view
        shot(page, "12-engine-error")
        page.close()


def test_the_model_picker_lists_every_model_with_its_status_and_sends_the_pick(browser: Browser) -> None:
    """Several models (tiny engines behind the real registry): the picker lists each with its status, a
    picked unloaded model is named in the request, loads, and the list then says loaded."""
    from tests.registry.tiny_models import tiny_registry

    with ServerThread(build_app(None, models=tiny_registry(["alpha", "beta"]))) as server:
        page = browser.open(server.url)
        page.wait_for_function("document.querySelectorAll('#model-pick option').length === 2")
        options = page.eval_on_selector_all("#model-pick option", "os => os.map(o => o.textContent)")
        assert options == ["alpha (unloaded)", "beta (unloaded)"]
        assert "loads on its first request" in page.inner_text("#model")
        page.select_option("[data-testid=model]", "beta")
        page.click("[data-mode=completion]")
        set_params(page, temperature=0, max_tokens=4)
        page.fill("[data-testid=prompt]", "hello")
        page.click("[data-testid=send]")
        finished(page)
        page.wait_for_function("[...document.querySelectorAll('#model-pick option')].some("
                               "o => o.textContent === 'beta (loaded)')")
        status = {r["id"]: r["status"]["value"] for r in httpx.get(f"{server.url}/v1/models").json()["data"]}
        assert status == {"alpha": "unloaded", "beta": "loaded"}
        assert page.input_value("[data-testid=model]") == "beta" and "window" in page.inner_text("#model")
        shot(page, "12-model-picker")
        assert browser.problems == []
        page.close()
