"""Speculative decoding on the real models, default path (dtype auto): exact, checked where it matters.

* every verified position's logits equal, bit for bit, the logits decoding without speculation computes
  there (the batch-invariant native stack makes a 1 + k run compute each position as a single decode);
* greedy and seeded sampled tokens identical with speculation on and off, on echo-heavy and plain chat;
* through `haltwise serve` and the official `openai` client, streamed and not: the same text on and off.
"""
from __future__ import annotations

import re

import httpx
import openai
import pytest
import torch

from haltwise.engine.factory import build_engine
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from tests.engine.test_determinism_real import assert_fast_path, default_config
from tests.models.real_models import real_model_path
from tests.server.browser_helpers import serve

pytestmark = pytest.mark.slow
NO_LOOPS = RepetitionDetection(enabled=False)
CODE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
ECHO = [
    f"Rename the function area to rectangle_area in this code and show the whole file:\n\n{CODE}",
    'Rewrite this JSON with the key "name" renamed to "full_name":\n{"name": "Ada Lovelace", "born": 1815, '
    '"field": "mathematics", "known_for": "the first published algorithm"}',
    "Quote the sentence about the harbour, then say who lived there.\n\nThe town was small. In the old "
    "harbour, a fisherman named Tom lived with his three cats. Every morning the boats left at dawn.",
]
PLAIN = ["What is the capital of France? Answer in one sentence.", "Write a haiku about autumn."]


def chat_ids(engine, text: str) -> list[int]:
    return engine.tokenizer.encode(engine.tokenizer.apply_chat_template([{"role": "user", "content": text}]),
                                   add_special_tokens=False)


def generate(engine, prompt: list[int], params: SamplingParams, k: int, trace: list | None = None):
    """(output token ids, drafts accepted) with engine.speculator set to k drafts a step."""
    engine.speculator.num_tokens = k
    before = engine.speculator.num_accepted
    engine.add_request("r", prompt, params)
    out = None
    while engine.has_unfinished():
        for u in engine.step():
            out = u if u.finished else out
    return list(out.outputs[0].token_ids), engine.speculator.num_accepted - before


def record_logits(engine) -> dict[int, list[tuple[int, list[int], torch.Tensor]]]:
    """Wrap the runner: position -> [(row start, the row's inputs up to the position, logits)]."""
    seen: dict[int, list[tuple[int, list[int], torch.Tensor]]] = {}
    execute = engine.runner.execute

    def recording(rows):
        logits = execute(rows)
        i = 0
        for row in rows:
            inputs = row.token_ids[row.start:row.end] + row.draft_token_ids
            for j in range(row.num_logits):
                position = row.end - 1 + j
                seen.setdefault(position, []).append((row.start, inputs[:position - row.start + 1], logits[i].clone()))
                i += 1
        return logits

    engine.runner.execute = recording
    return seen


@pytest.fixture(scope="module", params=["smollm2-135m", "qwen2.5-coder-0.5b"])
def engine(request):
    model = None if request.param == "smollm2-135m" else str(real_model_path(request.param))
    eng = build_engine(model, default_config("--speculative-tokens", "4"))
    assert_fast_path(eng)
    assert eng.speculator.num_tokens == 4
    return eng


@pytest.mark.timeout(2400)
def test_verified_positions_give_decode_logits_bit_for_bit(engine):
    prompt = chat_ids(engine, ECHO[0])
    params = SamplingParams(temperature=0.0, max_tokens=48, repetition_detection=NO_LOOPS)
    seen = record_logits(engine)
    try:
        off, _ = generate(engine, prompt, params, 0)
        decoded = {p: rows[-1] for p, rows in seen.items()}
        seen.clear()
        on, accepted = generate(engine, prompt, params, 4)
    finally:
        del engine.runner.execute
    assert on == off and accepted > 0
    tokens = prompt + off
    checked = 0
    for position, rows in seen.items():
        for start, inputs, logits in rows:   # verified: every input of the run up to here was the real token
            if inputs == tokens[start:position + 1] and position in decoded:
                assert torch.equal(logits, decoded[position][2]), f"position {position}"
                checked += 1
    assert checked > len(off) // 2


@pytest.mark.timeout(2400)
def test_greedy_and_seeded_tokens_identical_on_and_off(engine):
    total = 0
    for text in ECHO + PLAIN:
        prompt = chat_ids(engine, text)
        for params in (SamplingParams(temperature=0.0, max_tokens=64, repetition_detection=NO_LOOPS),
                       SamplingParams(temperature=0.8, top_p=0.95, seed=7, max_tokens=48, repetition_penalty=1.05,
                                      repetition_detection=NO_LOOPS)):
            off, _ = generate(engine, prompt, params, 0)
            on, accepted = generate(engine, prompt, params, 4)
            assert on == off, text
            total += accepted
    assert total > 0


def test_http_streaming_same_text_with_and_without_speculation():
    """Black box: serve --speculative-tokens 0 vs the default (speculation on), the official client,
    streamed and not."""
    answers = {}
    for flags in (("--speculative-tokens", "0"), ()):
        for url in serve("--kv-cache-memory", "128MiB", "--max-model-len", "1024", *flags):
            client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)
            got = []
            for text in ECHO + PLAIN[:1]:
                body = dict(model=client.models.list().data[0].id, messages=[{"role": "user", "content": text}],
                            max_tokens=64, temperature=0)
                full = client.chat.completions.create(**body)
                stream = list(client.chat.completions.create(**body, stream=True))
                streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                assert streamed == full.choices[0].message.content
                assert stream[-1].choices[0].finish_reason == full.choices[0].finish_reason
                got.append((full.choices[0].message.content, full.choices[0].finish_reason))
            metrics = httpx.get(url + "/metrics").text
            accepted = float(re.search(r"^haltwise_spec_accepted_tokens_total (\S+)", metrics, re.M).group(1))
            assert (accepted > 0) == (not flags), accepted
        answers[flags] = got
    assert answers[()] == answers[("--speculative-tokens", "0")]
