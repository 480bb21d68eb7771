"""The step-time model (engine/step_cost.py): it learns fixed, per-token and per-pair costs from observed
steps, keeps what a prompt costs through long decoding, and sizes a chunk that shrinks as the context grows."""
from haltwise.engine.step_cost import MIN_CHUNK, MIN_STEPS, StepCost, prefill_pairs

# A host where a step costs 20 ms, plus 4 ms a token (the linears), plus 20 ns a pair (the attention).
FIXED, PER_TOKEN, PER_PAIR = 0.02, 0.004, 2e-8


def true_time(tokens: int, pairs: int) -> float:
    return FIXED + PER_TOKEN * tokens + PER_PAIR * pairs


def prefill(cost: StepCost, length: int, chunk: int) -> None:
    """Observe a prompt of `length` tokens run in chunks of about `chunk` (sizes vary, as the scheduler's do),
    each beside one decode at position 100, and a decode-only step after each chunk."""
    start, sizes = 0, (chunk, chunk // 2, chunk * 3 // 4)
    while start < length:
        n = min(sizes[start % 3], length - start)
        pairs = prefill_pairs(start, n) + 101
        cost.observe(n + 1, pairs, true_time(n + 1, pairs))
        cost.observe(1, 101, true_time(1, 101))
        start += n


def test_pairs_of_a_chunk() -> None:
    assert prefill_pairs(0, 1) == 1 and prefill_pairs(0, 3) == 1 + 2 + 3
    assert prefill_pairs(10, 2) == 11 + 12
    assert prefill_pairs(0, 5) + prefill_pairs(5, 7) == prefill_pairs(0, 12)


def test_learns_the_three_costs_from_a_prompt() -> None:
    cost = StepCost()
    prefill(cost, 4096, 512)
    assert cost.calibrated
    for tokens, pairs in [(1, 8000), (256, prefill_pairs(16000, 256)), (2048, prefill_pairs(0, 2048))]:
        assert abs(cost.predict(tokens, pairs) - true_time(tokens, pairs)) < 1e-3 * true_time(tokens, pairs)


def test_uncalibrated_until_steps_of_prompt_size() -> None:
    cost = StepCost()
    for i in range(50):                                # decoding only: the per-token cost is unknown
        cost.observe(4, 4 * (100 + i), true_time(4, 4 * (100 + i)))
    assert not cost.calibrated
    budget = cost.step_budget(0.5, 4, 400, uncalibrated_chunk=256)
    assert budget.chunk(0, 2048) == 256
    for i in range(MIN_STEPS):
        cost.observe(MIN_CHUNK, prefill_pairs(i * MIN_CHUNK, MIN_CHUNK), 0.2)
    assert cost.calibrated


def test_chunk_fits_the_target_and_shrinks_with_context() -> None:
    cost = StepCost()
    prefill(cost, 8192, 256)
    target = 0.5
    chunks = [cost.max_chunk(start, 2048, target - cost.predict(1, 101)) for start in (0, 4096, 16384)]
    assert chunks[0] > chunks[1] > chunks[2] >= 1, chunks
    for start, n in zip((0, 4096, 16384), chunks):
        step = true_time(n + 1, prefill_pairs(start, n) + 101)
        assert step <= target < true_time(n + 2, prefill_pairs(start, n + 1) + 101), (start, n, step)
    assert cost.max_chunk(0, 16, target) == 16          # the limit bounds it (max_num_batched_tokens)


def test_decoding_for_long_does_not_forget_prompt_cost() -> None:
    cost = StepCost()
    prefill(cost, 4096, 512)
    before = cost.max_chunk(4096, 2048, 0.5)
    for i in range(5000):
        cost.observe(2, 2 * 4096, true_time(2, 2 * 4096))
    assert abs(cost.max_chunk(4096, 2048, 0.5) - before) <= before // 20


def test_step_budget_spends_time_per_chunk() -> None:
    cost = StepCost()
    prefill(cost, 4096, 512)
    budget = cost.step_budget(0.5, 1, 101, uncalibrated_chunk=256)
    first = budget.chunk(0, 2048)
    second = budget.chunk(0, 2048)       # a second prompt in the same step gets what the first left
    assert first > MIN_CHUNK and second == MIN_CHUNK   # the floor: a prompt always moves
    assert budget.seconds_left < 0


def test_equal_chunks_price_tokens_not_a_fixed_cost() -> None:
    cost = StepCost()                     # a prompt in equal chunks, nothing else: fixed and per-token collinear
    for start in range(0, 4096, 512):
        cost.observe(512, prefill_pairs(start, 512), true_time(512, prefill_pairs(start, 512)))
    assert cost.predict(1, 101) < true_time(1, 101)                    # a decode is never overpriced
    for start in (0, 4096):                                             # chunks are never oversized
        n = cost.max_chunk(start, 2048, 1.0)
        assert true_time(n, prefill_pairs(start, n)) <= 1.0 + FIXED


def test_costs_never_negative() -> None:
    cost = StepCost()
    for tokens in (40, 80, 160, 320):     # bigger steps measured faster: noise, never a negative cost
        cost.observe(tokens, 0, 1.0 / tokens)
    assert all(c >= 0 for c in cost._coef)
    assert cost.max_chunk(0, 2048, 10.0) == 2048
