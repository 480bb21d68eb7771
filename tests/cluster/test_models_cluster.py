"""`haltwise serve --models-dir DIR --replicas 2` end to end: a loopback Ray cluster, two catalog GGUFs
(symlinked into a temp folder), real HTTP and the official openai client.

One server for the module (Ray's start and each model's first load are what cost here); the tests run in
file order and the last one unloads and loads again.
"""
from __future__ import annotations

from typing import Iterator

import httpx
import openai
import pytest

from tests.registry.test_serve_models import models_dir
from tests.cluster.serve_subprocess import replica_server
from tests.server.http_helpers import metric, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
SMALL, GEMMA = "smollm2-135m", "gemma3-270m"
HEADER = "x-haltwise-replica"
SLOW = {"timeout": 900}          # a first request waits for its model's load: generous on a shared 2-core host


class Served:
    def __init__(self, url: str):
        self.url = url
        self.openai = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)

    def complete(self, model: str, prompt: str = "The capital of France is") -> tuple[str, str]:
        """(the replica that served it, the greedy text)."""
        raw = self.openai.completions.with_raw_response.create(model=model, prompt=prompt, max_tokens=6,
                                                               temperature=0, extra_body=SLOW)
        return raw.headers[HEADER], raw.parse().choices[0].text

    def models(self) -> dict[str, dict]:
        return {r["id"]: r for r in httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    pytest.importorskip("ray.serve", reason="the cluster extra is not installed")
    folder = models_dir(tmp_path_factory.mktemp("models"), (SMALL, GEMMA))
    args = ["--models-dir", str(folder), "--replicas", "2", "--replica-cpus", "0.5", "--kv-cache-memory", "64MiB"]
    with replica_server(args, folder.parent / "serve.log", 420) as (_, url):
        yield Served(url)


def test_each_model_goes_to_the_replica_that_has_it_loaded(served) -> None:
    assert {m: r["status"]["value"] for m, r in served.models().items()} == {SMALL: "unloaded", GEMMA: "unloaded"}
    small_on, small_text = served.complete(SMALL)
    gemma_on, gemma_text = served.complete(GEMMA)
    assert gemma_on != small_on                        # the roomiest replica (no model yet) loads the second one
    assert small_text != gemma_text                    # each request ran the model it named
    for _ in range(2):                                 # then each model's requests stay with its replica
        assert served.complete(SMALL) == (small_on, small_text)
        assert served.complete(GEMMA) == (gemma_on, gemma_text)
    rows = served.models()
    for name, on in ((SMALL, small_on), (GEMMA, gemma_on)):
        assert rows[name]["status"] == {"value": "loaded"} and rows[name]["kv_capacity"]["tokens"] > 0
        assert [r["id"] for r in rows[name]["replicas"]] == [on]
        assert metric(served.url, "haltwise_model_loads_total", model=name, replica=on) == 1
    cluster = {r["id"]: r["models"] for r in httpx.get(f"{served.url}/cluster", timeout=30).json()["replicas"]}
    assert cluster == {small_on: {SMALL: "loaded"}, gemma_on: {GEMMA: "loaded"}}


def test_both_models_stream_through_the_ingress(served) -> None:
    for model in (SMALL, GEMMA):
        on, text = served.complete(model, "Once upon a time")
        with served.openai.completions.with_streaming_response.create(
                model=model, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True,
                extra_body=SLOW) as raw:
            assert raw.headers[HEADER] == on
            chunks = list(raw.parse())
        assert "".join(c.choices[0].text for c in chunks) == text   # streamed = not streamed, token for token
        assert len([c for c in chunks if c.choices[0].text]) > 1      # a chunk per engine step, not one at the end
        assert chunks[-1].choices[0].finish_reason == "length" and all(c.model == model for c in chunks)
    chat = served.openai.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": "Hi!"}],
                                                 max_tokens=4, temperature=0, stream=True, extra_body=SLOW)
    assert "".join(c.choices[0].delta.content or "" for c in chat if c.choices)   # templated at the ingress


def test_an_unknown_model_is_404_on_every_surface(served) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        served.openai.completions.create(model="llama-70b", prompt="x", max_tokens=2)
    assert raised.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        served.openai.chat.completions.create(model="llama-70b", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        served.openai.responses.create(model="llama-70b", input="x")
    anthropic = httpx.post(f"{served.url}/v1/messages", timeout=30, json={
        "model": "llama-70b", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
    assert anthropic.status_code == 404 and anthropic.json()["error"]["type"] == "not_found_error"
    for path in ("/models/load", "/models/unload"):
        r = httpx.post(f"{served.url}{path}", json={"model": "llama-70b"}, timeout=30)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_unload_leaves_every_replica_load_goes_to_the_roomiest_and_keep_alive_reaches_it(served) -> None:
    rows = served.models()
    small_on = [r["id"] for r in rows[SMALL]["replicas"]]
    gemma_on = [r["id"] for r in rows[GEMMA]["replicas"]]
    r = httpx.post(f"{served.url}/models/unload", json={"model": SMALL}, timeout=120)
    assert r.status_code == 200 and r.json()["status"] == {"value": "unloaded"} and "replicas" not in r.json()
    for on in small_on:   # the counters come with the replicas' next reports
        assert wait_until(lambda: metric(served.url, "haltwise_model_unloads_total", model=SMALL, reason="request",
                                         replica=on) == 1, 10)
    r = httpx.post(f"{served.url}/models/load", json={"model": SMALL}, timeout=900)
    assert r.status_code == 200 and r.json()["status"] == {"value": "loaded"}, r.text
    again = [x["id"] for x in r.json()["replicas"]]
    assert len(again) == 1 and again[0] not in gemma_on            # the replica without a model took it
    assert served.complete(SMALL)[0] == again[0]
    served.openai.completions.create(model=SMALL, prompt="Bye", max_tokens=2, extra_body={**SLOW, "keep_alive": 0})
    assert wait_until(lambda: served.models()[SMALL]["status"] == {"value": "unloaded"}, 30)   # on its replica
    unloads = 1 + (again[0] in small_on)                            # POST /models/unload's, then this one's
    assert wait_until(lambda: metric(served.url, "haltwise_model_unloads_total", model=SMALL, reason="request",
                                     replica=again[0]) == unloads, 10)
    assert served.models()[GEMMA]["status"] == {"value": "loaded"}
