"""logit_bias through the official openai client on the real server (tiny random model): it bans and forces
on completions, chat and Responses, loses to the grammar and the min_tokens ban, a -100 on eos is honoured
while max_tokens still ends the request, and the same biased request gives the same tokens in any batch."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

EOS = (0, 2)   # the tiny tokenizer's eos set


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def token_id(server, text: str, single: bool = False) -> int:
    """The first token of text (single: text must be exactly one token)."""
    ids = httpx.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert not single or len(ids) == 1, f"{text!r} is not one token: {ids}"
    return ids[0]


def detok(server, ids: list[int]) -> str:
    return httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]


def complete(server, **kw):
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": 4, "temperature": 0.0, **kw}
    extra = body.pop("extra_body", {})
    return client(server).completions.create(**body, extra_body={"ignore_eos": True, **extra}).choices[0]


def test_plus_100_forces_a_token_greedy_seeded_chat_and_responses(tiny_server) -> None:
    forced = token_id(tiny_server, "hello")
    want = detok(tiny_server, [forced] * 4)
    bias = {str(forced): 100}
    assert complete(tiny_server, logit_bias=bias).text == want
    assert complete(tiny_server, logit_bias=bias, temperature=1.0, seed=5).text == want
    chat = client(tiny_server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4, logit_bias=bias,
        extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == want
    resp = client(tiny_server).responses.create(model="tiny", input="hi", max_output_tokens=4,
                                                extra_body={"logit_bias": bias, "ignore_eos": True})
    assert resp.output_text == want


def test_minus_100_bans_the_greedy_token(tiny_server) -> None:
    plain = complete(tiny_server, logprobs=1)
    first = plain.logprobs.tokens[0]
    banned = complete(tiny_server, logprobs=1, logit_bias={str(token_id(tiny_server, first, single=True)): -100})
    assert banned.logprobs.tokens[0] != first
    assert first not in banned.logprobs.tokens


def test_eos_bias_fights_the_termination_layers(tiny_server) -> None:
    """+100 on eos ends the text at once (reason eos), but not before min_tokens (the ban wins); -100 on eos
    is honoured and max_tokens still ends the request."""
    on = {str(t): 100 for t in EOS}
    ended = complete(tiny_server, max_tokens=6, logit_bias=on, extra_body={"ignore_eos": False})
    assert ended.finish_reason == "stop" and ended.model_extra["termination"]["reason"] == "eos"
    assert ended.model_extra["termination"]["token_index"] == 0
    later = complete(tiny_server, max_tokens=6, logit_bias=on, extra_body={"ignore_eos": False, "min_tokens": 3})
    assert later.model_extra["termination"]["reason"] == "eos"
    assert later.model_extra["termination"]["token_index"] == 3
    off = complete(tiny_server, max_tokens=6, logit_bias={str(t): -100 for t in EOS},
                   extra_body={"ignore_eos": False})
    assert off.finish_reason == "length" and off.model_extra["termination"]["reason"] == "max_tokens"


def test_the_grammar_wins_over_a_plus_100_bias(tiny_server) -> None:
    forced = token_id(tiny_server, "hello")
    choice = complete(tiny_server, max_tokens=20, logit_bias={str(forced): 100},
                      extra_body={"structured_outputs": {"choice": ["up", "down"]}})
    assert choice.text in ("up", "down") and choice.finish_reason == "stop"


def test_a_biased_request_gives_the_same_tokens_alone_and_in_a_busy_batch(tiny_server) -> None:
    bias = {str(token_id(tiny_server, "hello")): 6, "7": -100, "40": 3.5}
    ask = dict(max_tokens=12, temperature=0.9, seed=11, logit_bias=bias)
    alone = complete(tiny_server, **ask).text
    with ThreadPoolExecutor(4) as pool:
        others = [pool.submit(complete, tiny_server, prompt=f"noise {i} " * (i + 1), max_tokens=12, seed=i,
                              temperature=1.0) for i in range(3)]
        busy = pool.submit(complete, tiny_server, **ask)
        assert busy.result().text == alone
        for f in others:
            f.result()
