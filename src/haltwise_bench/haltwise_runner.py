"""haltwise's side of the in-process benchmarks: timed runs over the synchronous LLMEngine.

Every run submits its requests at once and steps the engine until all have finished, exactly as
the offline `LLM.generate` does, timing the whole run with perf_counter and reading each request's
time to first token from RequestOutput.first_token_latency (arrival -> first sampled token).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

from haltwise_bench.common import Timed
from haltwise.engine.engine import LLMEngine
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import RepetitionDetection, SamplingParams


def fixed_length_params(max_tokens: int) -> SamplingParams:
    """Greedy, exactly max_tokens tokens: eos ignored and no loop detection (a timing run, not a chat)."""
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                          repetition_detection=RepetitionDetection(enabled=False))


class HaltwiseRunner:
    """Runs batches of token-id prompts through one LLMEngine and times them."""

    def __init__(self, engine: LLMEngine, name: str = "haltwise") -> None:
        self.engine = engine
        self.name = name
        self._ids = itertools.count()

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Timed:
        """All prompts at once, greedy, exactly max_tokens new tokens each."""
        params = fixed_length_params(max_tokens)
        start = time.perf_counter()
        ids = [self._add(p, params) for p in prompts]
        final = self._drain(set(ids))
        wall = time.perf_counter() - start
        outs = [final[i] for i in ids]
        return Timed(wall, tuple(o.first_token_latency or wall for o in outs),
                     sum(len(o.outputs[0].token_ids) for o in outs), sum(len(p) for p in prompts))

    def ttft_behind_long_prompt(self, long_prompt: list[int], short_prompts: list[list[int]],
                                max_tokens: int) -> list[float]:
        """TTFT of short requests arriving while `long_prompt` is being prefilled.

        The long request is added and one engine step runs (its prefill begins: the whole prompt
        when chunking is off, its first chunk when on). The short requests are then added with
        an arrival time 1 ms after that step began: they arrived while it ran and, as on a live
        server, could not be scheduled before it ended. Returns their TTFTs (seconds).
        """
        params = fixed_length_params(max_tokens)
        long_id = self._add(long_prompt, params)
        step_start = time.monotonic()
        done = {u.request_id: u for u in self.engine.step() if u.finished}
        arrival = step_start + 1e-3
        short_ids = [self._add(p, params, arrival) for p in short_prompts]
        final = self._drain(set(short_ids) | {long_id}, done)
        return [final[i].first_token_latency for i in short_ids]

    def _add(self, prompt: list[int], params: SamplingParams, arrival: float | None = None) -> str:
        request_id = f"{self.name}-bench-{next(self._ids)}"
        self.engine.add_request(request_id, list(prompt), params, arrival_time=arrival)
        return request_id

    def _drain(self, ids: set[str], done: dict[str, RequestOutput] | None = None) -> dict[str, RequestOutput]:
        final = dict(done or {})
        while not ids <= final.keys():
            for update in self.engine.step():
                if update.finished:
                    final[update.request_id] = update
        return final


def sibling_engine(engine: LLMEngine, **config_changes) -> LLMEngine:
    """A second engine over the same weights and tokenizer with some EngineConfig fields changed
    (e.g. enable_chunked_prefill=False); it has its own KV pool and scheduler."""
    return LLMEngine(engine_model(engine), engine.model_config, engine.tokenizer,
                     replace(engine.config, **config_changes), engine.max_model_len,
                     generation_eos_ids=tuple(engine.eos_token_ids), default_timeout=engine.default_timeout)


def engine_model(engine: LLMEngine):
    """The engine's model (a fault-injection wrapper holds the real runner as .runner)."""
    runner = engine.runner
    return getattr(runner, "model", None) or runner.runner.model
