"""Prefill chunks sized to a target step time (engine/step_cost.py, docs/engine-steps.md): decodes beside a
long prompt keep receiving tokens while it is computed, and the chunking that timing chooses never changes a
token on the default path."""
import torch

from haltwise.config import EngineConfig
from haltwise.engine.faults import ENV_VAR
from haltwise.engine.factory import build_engine
from haltwise.engine.step_cost import MIN_STEPS
from haltwise.sampling_params import RepetitionDetection, SamplingParams

LONG = 1500                    # prompt tokens: one step's worth of the 2048-token budget
STREAMS = 4
NO_LOOPS = RepetitionDetection(enabled=False)


def long_prompt(vocab: int) -> list[int]:
    return torch.randint(10, vocab, (LONG,), generator=torch.Generator().manual_seed(5)).tolist()


def tokens_beside_prefill(engine, params: SamplingParams) -> tuple[dict[str, int], dict[str, list]]:
    """STREAMS decodes run; then the long prompt arrives. Returns (tokens each decode stream received between
    the long prompt's arrival and its first token, every request's output tokens and logprobs at the end)."""
    vocab = engine.model_config.vocab_size
    for i in range(STREAMS):
        engine.add_request(f"d{i}", [11 + i, 12 + i, 13 + i], params)
    for _ in range(MIN_STEPS + 2):
        engine.step()
    engine.add_request("long", long_prompt(vocab), SamplingParams(temperature=1.0, seed=3, max_tokens=2, logprobs=0,
                                                                  ignore_eos=True, repetition_detection=NO_LOOPS))
    during = dict.fromkeys((f"d{i}" for i in range(STREAMS)), 0)
    final: dict[str, list] = {}
    prefilling = True
    while engine.has_unfinished():
        for update in engine.step():
            out = update.outputs[0]
            if update.request_id == "long" and out.token_ids:
                prefilling = False
            elif prefilling and update.request_id in during:
                during[update.request_id] += len(out.delta_token_ids)
            if update.finished:
                final[update.request_id] = [(t.token_id, t.logprob) for t in out.logprobs or []] or out.token_ids
    return during, final


def test_decodes_keep_receiving_tokens_beside_a_long_prefill(monkeypatch) -> None:
    # Each of the tiny model's layers takes 0.1 ms per token of its step: the long prompt costs ~0.3 s, 6x the
    # 0.05 s target, however fast this host's own arithmetic is.
    monkeypatch.setenv(ENV_VAR, "heavy@1-100000:0.0001")
    params = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True, repetition_detection=NO_LOOPS)

    def run(step_target_s: float) -> dict[str, int]:
        engine = build_engine(engine_config=EngineConfig(kv_cache_memory=16 * 2**20, max_model_len=2048,
                                                         step_target_s=step_target_s), tiny=True)
        return tokens_beside_prefill(engine, params)[0]

    sized = run(0.05)
    assert all(n >= 5 for n in sized.values()), sized
    # budget only: the whole prompt is one step, which the decodes wait out (one token at most)
    assert all(n <= 1 for n in run(0.0).values())


def test_timing_moves_chunk_boundaries_never_tokens() -> None:
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=40, ignore_eos=True, repetition_detection=NO_LOOPS)
    outputs = []
    for step_target_s in (0.0, 1e-6):       # one chunk / chunks of the floor (nothing fits a 1 us step)
        engine = build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory=16 * 2**20,
                                                         max_model_len=2048, step_target_s=step_target_s), tiny=True)
        assert engine.runner.model.model.native_decode.every_step      # the default, batch-invariant path
        outputs.append(tokens_beside_prefill(engine, params)[1])
    assert outputs[0] == outputs[1]
    assert len(outputs[0]["long"]) == 2 and all(len(outputs[0][f"d{i}"]) == 40 for i in range(STREAMS))
