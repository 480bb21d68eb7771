"""Batched greedy decoding equals single-request decoding on the real model (float32)."""
from haltwise.sampling_params import RepetitionDetection, SamplingParams

PROMPTS = ["Once upon a time", "The three primary colors are", "def fibonacci(n):",
           "Paris is the capital of", "Write a haiku about autumn leaves.", "1. Apples\n2."]
NEAR_TIE = 1e-4  # a divergence is accepted only where the top-2 logits are this close


def test_batched_equals_single_up_to_near_ties(smollm2):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2,
                            repetition_detection=RepetitionDetection(enabled=False))
    batched = smollm2.generate(PROMPTS, params)
    for prompt, together in zip(PROMPTS, batched):
        alone = smollm2.generate(prompt, params)[0].outputs[0]
        ids_a, ids_b = alone.token_ids, together.outputs[0].token_ids
        first = next((i for i, (a, b) in enumerate(zip(ids_a, ids_b)) if a != b), None)
        if first is None:
            assert ids_a == ids_b
            continue
        top = alone.logprobs[first].top
        gap = top[0][1] - top[1][1]
        assert gap < NEAR_TIE, f"{prompt!r}: diverged at token {first} with a top-2 gap of {gap}"
