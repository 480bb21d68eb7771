"""Black box on the newer dense families: `haltwise serve --model <tiny converted q8_0 GGUF>` with default flags.

Each model is tests/models/converted.py's fixture of the family (llama.cpp's converter, the family's real chat
template and end tokens in the GGUF; q8_0, gpt-oss with MXFP4 experts). Per family: the determinism probe of test_http_determinism.py (alone 4
times -- the repeats hit the prefix cache -- then beside 1, 3 and 7 others); a chat rendered by the family's
template on /v1/chat/completions and /v1/messages (the same prompt tokens, the same greedy text); and each of the
family's end tokens, once generated, ends the reply as a stop and never shows in the text. gpt-oss (an MoE with
attention sinks and MXFP4 experts) runs the native layer stack every step (docs/native-moe.md); its harmony <|end|>
closes a message, not the reply.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest

from haltwise.tokenizer.tokenizer import Tokenizer
from tests.models.converted import fixture
from tests.server.browser_helpers import serve
from tests.server.test_http_determinism import OTHERS, TARGET, complete

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
SHORT_TARGET = {**TARGET, "max_tokens": 16}
END_TOKENS = {"phi3": ("<|end|>", "<|endoftext|>"), "gemma2": ("<end_of_turn>", "<eos>"),
              "gpt-oss": ("<|return|>", "<|call|>")}
CHAT = [{"role": "user", "content": "Say hi."}]
FILES = {"gpt-oss": "mxfp4"}          # gpt-oss as released: MXFP4 experts (the others: q8_0)


@pytest.fixture(scope="module", params=sorted(END_TOKENS))
def family(request) -> Iterator[tuple[str, str, Tokenizer]]:
    path = fixture(request.param).gguf(FILES.get(request.param, "q8_0"))
    # The first start measures the kernel plan for this file (minutes on a busy host; cached afterwards).
    for url in serve("--model", str(path), "--kv-cache-memory", "64MiB", "--max-model-len", "256",
                     start_limit=1500.0):
        yield request.param, url, Tokenizer.from_gguf(path)


def test_same_request_same_text_alone_and_beside_others(family) -> None:
    arch, url, _ = family
    answers = [complete(url, SHORT_TARGET) for _ in range(4)]
    assert len(set(answers)) == 1, answers
    for k in (1, 3, 7):
        bodies = [SHORT_TARGET] + [{"prompt": p, "max_tokens": 8 + 4 * i, "temperature": 0}
                                   for i, p in enumerate(OTHERS[:k])]
        with ThreadPoolExecutor(len(bodies)) as pool:
            got = list(pool.map(lambda b: complete(url, b), bodies))
        assert got[0] == answers[0], f"{arch} beside {k} others: {got[0][0]!r} != {answers[0][0]!r}"


def test_chat_and_messages_render_the_family_template(family) -> None:
    arch, url, tok = family
    rendered = tok.apply_chat_template(CHAT)
    want_prompt = len(tok.encode(rendered, add_special_tokens=False))
    chat = httpx.post(url + "/v1/chat/completions", timeout=600,
                      json={"messages": CHAT, "max_tokens": 8, "temperature": 0})
    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    messages = httpx.post(url + "/v1/messages", timeout=600,
                          json={"model": model, "messages": CHAT, "max_tokens": 8, "temperature": 0})
    assert chat.status_code == 200 and messages.status_code == 200, (chat.text, messages.text)
    chat, messages = chat.json(), messages.json()
    assert chat["usage"]["prompt_tokens"] == messages["usage"]["input_tokens"] == want_prompt, rendered
    text = "".join(block["text"] for block in messages["content"] if block["type"] == "text")
    assert chat["choices"][0]["message"]["content"] == text


@pytest.mark.parametrize("which", [0, 1])
def test_end_tokens_stop_the_reply(family, which) -> None:
    """logit_bias makes the end token the greedy pick: the reply stops there, the token kept out of the text."""
    arch, url, tok = family
    end = END_TOKENS[arch][which]
    token = tok.token_to_id(end)
    assert token in tok.eos_token_ids(), f"{arch}: {end} is not in the eos set"
    reply = httpx.post(url + "/v1/chat/completions", timeout=600,
                       json={"messages": CHAT, "max_tokens": 8, "temperature": 0, "logit_bias": {str(token): 100}})
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] == "", choice


def test_harmony_end_closes_a_message_not_the_reply() -> None:
    """gpt-oss: <|return|> and <|call|> end the reply; <|end|> (after the analysis channel) does not. Phi-3's
    <|end|> still ends its turn."""
    harmony = Tokenizer.from_gguf(fixture("gpt-oss").gguf("q8_0"))
    eos = harmony.eos_token_ids()
    assert {harmony.token_to_id("<|return|>"), harmony.token_to_id("<|call|>")} <= eos
    assert harmony.token_to_id("<|end|>") not in eos
    assert harmony.token_to_id("<|end|>") not in harmony.eos_token_ids([harmony.token_to_id("<|end|>")])
    phi3 = Tokenizer.from_gguf(fixture("phi3").gguf("q8_0"))
    assert phi3.token_to_id("<|end|>") in phi3.eos_token_ids()

