"""Black box on a mixture-of-experts model: `haltwise serve --model <tiny qwen3moe q8_0 GGUF>` with default flags.

The model is tests/models/converted.py's qwen3moe fixture (llama.cpp's converter, q8_0: its experts run
through the kernel plan's quantized formats). The determinism probe of test_http_determinism.py runs on it
(alone 4 times -- the repeats hit the prefix cache -- then beside 1, 3 and 7 others; text and every token's
logprob compared exactly), and a chat request
renders the family's real template (Qwen3's, from the GGUF metadata). The native layer stack runs the MoE
layers on every step (csrc/moe_block.cpp), so the default path is batch invariant and prompt lookup drafts.
The same model served with its experts mapped from files (--expert-weights mapped) answers with the same bits.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest

from haltwise.tokenizer.tokenizer import Tokenizer
from tests.models.converted import fixture
from tests.server.browser_helpers import serve
from tests.server.test_http_determinism import OTHERS, TARGET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
MOE_TARGET = {**TARGET, "max_tokens": 16}     # a tiny model's steps are still seconds on a shared 2-core host


@pytest.fixture(scope="module")
def moe_gguf():
    return fixture("qwen3moe").gguf("q8_0")


@pytest.fixture(scope="module")
def moe_server(moe_gguf) -> Iterator[str]:
    # The first start measures the kernel plan for this file (minutes on a busy host; cached afterwards).
    yield from serve("--model", str(moe_gguf), "--kv-cache-memory", "64MiB", "--max-model-len", "512",
                     start_limit=1500.0)


def exact(url: str, body: dict) -> tuple[str, list[float]]:
    """The text and every token's logprob (float32 logits' bits, as JSON numbers): a last-bit difference in a
    logit anywhere in the stack shows here even where the greedy tokens do not move."""
    choice = httpx.post(url + "/v1/completions", json={**body, "logprobs": 2}, timeout=600).json()["choices"][0]
    return choice["text"], choice["logprobs"]["token_logprobs"]


def test_moe_same_request_same_text_alone_and_beside_others(moe_server) -> None:
    answers = [exact(moe_server, MOE_TARGET) for _ in range(4)]
    assert all(a == answers[0] for a in answers), answers
    for k in (1, 3, 7):
        bodies = [MOE_TARGET] + [{"prompt": p, "max_tokens": 8 + 4 * i, "temperature": 0}
                                 for i, p in enumerate(OTHERS[:k])]
        with ThreadPoolExecutor(len(bodies)) as pool:
            got = list(pool.map(lambda b: exact(moe_server, b), bodies))
        assert got[0] == answers[0], f"beside {k} others: {got[0]!r} != {answers[0]!r}"


def test_moe_chat_renders_the_family_template(moe_server) -> None:
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0}
    reply = httpx.post(moe_server + "/v1/chat/completions", json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    # Qwen3's template: <|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n -- more than the words.
    assert usage["prompt_tokens"] > 8 and usage["completion_tokens"] <= 8


def test_moe_eos_set_has_the_family_end_token(moe_gguf) -> None:
    tok = Tokenizer.from_gguf(moe_gguf)
    assert tok.token_to_id("<|im_end|>") in tok.eos_token_ids()
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in text


def test_moe_default_path_speculates_with_prompt_lookup(moe_server) -> None:
    """Prompt lookup runs only where every step is batch invariant (engine/speculation.py): a prompt whose suffix
    occurred earlier gets drafts (usage.speculation), as on the dense families."""
    body = {"prompt": "red green blue gold red green blue gold red green blue gold red green", "max_tokens": 8,
            "temperature": 0}
    reply = httpx.post(moe_server + "/v1/completions", json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"].get("speculation", {}).get("drafted", 0) > 0, reply.json()["usage"]


def test_moe_experts_mapped_from_files_answer_the_same(moe_gguf, moe_server) -> None:
    """`--expert-weights mapped` (engine/expert_weights.py: what a model larger than half the memory gets by
    default) serves the experts from the record file's pages: the same text and logprob bits as the default
    server, which holds this small model's experts in memory."""
    expected = exact(moe_server, MOE_TARGET)
    for url in serve("--model", str(moe_gguf), "--kv-cache-memory", "64MiB", "--max-model-len", "512",
                     "--expert-weights", "mapped", start_limit=1500.0):
        assert exact(url, MOE_TARGET) == expected
