"""The natural-chat workload: answers that end by themselves are ok, cap hits are counted, decode is timed
after the first token; against the fake server's instruments and a real haltwise serve on the default model."""
import asyncio

import pytest

from haltwise_bench.common import default_gguf
from haltwise_bench.natural_chat import PROMPTS, ChatResult, chat_payload, run_chat_load
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd


def test_the_workload_is_a_dozen_distinct_everyday_prompts():
    assert len(PROMPTS) == 12 and len(set(PROMPTS)) == 12
    body = chat_payload(PROMPTS[0], 256)
    assert body["messages"] == [{"role": "user", "content": PROMPTS[0]}]
    assert body["temperature"] == 0.0 and body["stream"] and "ignore_eos" not in body


def test_decode_speed_counts_the_tokens_after_the_first():
    assert ChatResult(True, 0.5, 2.0, 21, "stop").decode_tokens_per_s == 10.0
    assert ChatResult(True, 0.5, 0.0, 1, "stop").decode_tokens_per_s is None     # a one-token answer: no decode


@pytest.mark.parametrize("max_tokens, capped", [(4, 12), (64, 0)])
def test_answers_that_end_are_ok_and_cap_hits_are_counted(max_tokens, capped):
    """Named fault: counting every finished answer as capped (or none): the fake ends its answers after 6
    tokens, so a 4-token cap is hit by all 12 requests and a 64-token cap by none; all 12 are ok either way."""
    from tests.haltwise_bench.fake_openai_server import fake_app
    from tests.server.http_helpers import ServerThread

    with ServerThread(fake_app()) as server:
        load = asyncio.run(run_chat_load(server.url, PROMPTS, 3, max_tokens, model="fake"))
    s = load.summary()
    assert s["requests"] == 12 and s["ok"] == 12 and s["failed"] == 0 and s["errors"] == []
    assert s["capped"] == capped
    assert s["completion_tokens"] == 12 * min(max_tokens, 6)
    assert s["stream_tok_s"] > 0 and s["tokens_per_s"] > 0 and s["ttft_p50_s"] <= s["ttft_p95_s"]


def test_an_error_is_a_failed_request_not_an_exception():
    from tests.haltwise_bench.fake_openai_server import fake_app
    from tests.server.http_helpers import ServerThread

    with ServerThread(fake_app("refuse_all")) as server:
        s = asyncio.run(run_chat_load(server.url, PROMPTS[:2], 2, 16, model="fake")).summary()
    assert s["ok"] == 0 and s["failed"] == 2 and s["completion_tokens"] == 0 and "HTTP 503" in s["errors"][0]


def test_a_real_answer_ends_by_itself_through_the_chat_template():
    """haltwise serve on the default model (its chat template applied by the server): a short factual
    question ends by itself well under the cap, and the stream's timing is read."""
    port = free_port()
    with ServerProcess(haltwise_server_cmd(port, model=str(default_gguf())), port, "haltwise", "/ready") as server:
        load = asyncio.run(run_chat_load(server.base_url, [PROMPTS[0]], 1, 96))
    (r,) = load.results
    assert r.ok and r.finish_reason == "stop" and not r.capped, r
    assert 1 < r.completion_tokens < 96 and r.ttft_s > 0 and r.decode_tokens_per_s > 0
