"""The near-loop detector: fires on repeats that grow or drift, stays quiet on varied text."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from haltwise.stopping.loops import RepetitionDetector
from haltwise.stopping.near_loops import NearLoopDetector


def first_fire(det: NearLoopDetector, tokens: list[int]) -> int | None:
    for i, t in enumerate(tokens):
        if det.append(t):
            return i
    return None


def growing_names(copies: int) -> list[int]:
    """name_1 = 1; name_12 = 12; name_123 = 123; ... : each copy one token longer than the last."""
    out: list[int] = []
    for k in range(1, copies + 1):
        out += [7, 8, 9] + list(range(100, 100 + k)) + [10, 11, 12]
    return out


def nested(copies: int) -> list[int]:
    """{"a": {"b": 1, "a": {"b": 2, "a": ... : the same object again, inside itself, a counter drifting."""
    out: list[int] = []
    for k in range(copies):
        out += [1, 2, 3, 4, 5, 6, 200 + k % 3, 13, 14]
    return out


def test_growing_repeats_fire_where_the_exact_detector_cannot() -> None:
    tokens = growing_names(14)
    exact = RepetitionDetector()
    assert not any(exact.append(t) for t in tokens)
    assert first_fire(NearLoopDetector(), tokens) is not None


def test_drifting_nested_repeats_fire() -> None:
    assert first_fire(NearLoopDetector(), nested(20)) is not None


def test_varied_text_never_fires() -> None:
    rng = random.Random(0)
    tokens = [rng.randrange(5000) for _ in range(2000)]
    assert first_fire(NearLoopDetector(), tokens) is None


def test_no_verdict_before_the_window_is_full() -> None:
    det = NearLoopDetector(ngram=2, window=50)
    assert first_fire(det, [1] * 60) == 50   # 50 tokens make 49 bigrams; the 51st token fills the window


def test_most_repeated_names_what_repeated() -> None:
    det = NearLoopDetector(ngram=3, window=30)
    first_fire(det, nested(10))
    two = nested(2)
    assert det.most_repeated() in {tuple(two[i:i + 3]) for i in range(len(two) - 2)}


@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.integers(0, 20), max_size=400), ngram=st.integers(1, 6), window=st.integers(2, 60))
def test_state_is_bounded_by_the_window_and_novelty_matches_a_recount(tokens, ngram, window) -> None:
    det = NearLoopDetector(ngram=ngram, window=window)
    grams: list[tuple[int, ...]] = []
    flags: list[bool] = []
    for i, t in enumerate(tokens):
        fired = det.append(t)
        if i + 1 >= ngram:
            g = tuple(tokens[i + 1 - ngram:i + 1])
            flags.append(g in grams[-window:])   # compared with the window before it slides
            grams.append(g)
        assert len(det._counts) <= window and len(det._keys) <= window
        recent = flags[-window:]
        if recent:
            assert abs(det.novelty - (1 - sum(recent) / len(recent))) < 1e-9
        assert fired == (len(recent) == window and det.novelty <= det.max_novelty)


def test_on_eval_stops_greedy_outputs_it_ends_the_runaways_and_no_finished_answer() -> None:
    """Replays the 45 greedy SmolLM2 outputs (recorded, re-encoded) through the default detector."""
    import json
    from pathlib import Path

    from haltwise.models.loader import default_model_path
    from haltwise.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(default_model_path())
    data = json.loads((Path(__file__).parent / "data" / "greedy_smollm2_256.json").read_text(encoding="utf-8"))
    fired = {g["id"] for g in data["generations"]
             if first_fire(NearLoopDetector(), tok.encode(g["text"], add_special_tokens=False)) is not None}
    runaways = {g["id"] for g in data["generations"] if g["ended_by"] == "max_tokens"}
    assert {"json-01", "json-04"} <= runaways
    assert fired == runaways


def test_most_repeated_is_none_before_any_ngram():
    det = NearLoopDetector(ngram=3, window=30)
    assert det.most_repeated() is None
