"""SequenceStopper: streaming == non-streaming, earliest stop wins, SPEC order, against a reference."""
import contextlib
import sys
from collections import Counter

import pytest
from hypothesis import Phase, event, given, settings, strategies as st

from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason, Termination
from tests.stopping.reference import brute_period

ALPHABET = "ab \n\té€<S>"
EOS = frozenset({0, 1})
SPECIAL = {"<S>": 9, "<|im_end|>": 0}  # "<S>" is also a special token's text (id 9)


def occurrences(text, stops, presets, after):
    """(start, end, stop_reason) of every stop/preset occurrence ending after char `after`."""
    occ = [(i, i + len(s), s) for s in set(stops) for i in range(len(text) - len(s) + 1)
           if text.startswith(s, i) and i + len(s) > after]
    for i, ch in enumerate(text):
        if ch != "\n":
            continue
        if "line" in presets and i + 1 > after:
            occ.append((i, i + 1, "line"))
        j = i + 1
        while j < len(text) and text[j] in " \t\r":
            j += 1
        if "paragraph" in presets and j < len(text) and text[j] == "\n" and j + 1 > after:
            occ.append((i, j + 1, "paragraph"))
    return occ


def holdback(text, stops, presets):
    best = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    if "paragraph" in presets:
        k = len(text) - len(text.rstrip(" \t\r"))
        if text[:len(text) - k].endswith("\n"):
            best = max(best, k + 1)
    return best


def reference(p: SamplingParams, tokens, num_prompt, max_total):
    """Brute force: (reason, stop_reason, token_index, final text), or None if still running."""
    text = ""
    special = {SPECIAL[s]: s for s in p.stop if s in SPECIAL}
    rd = p.repetition_detection
    for k, (tid, delta) in enumerate(tokens):
        n, before = k + 1, len(text)
        active = n >= p.min_tokens
        token_reason = None
        if active:
            if tid in p.stop_token_ids:
                token_reason = (Reason.STOP_TOKEN, tid)
            elif tid in special:
                token_reason = (Reason.STOP_STRING, special[tid])
            elif not p.ignore_eos and tid in EOS:
                token_reason = (Reason.EOS, None)
        if token_reason:
            return token_reason + (k, text + delta if p.include_stop_str_in_output else text)
        text += delta
        occ = occurrences(text, p.stop, p.stop_presets, before) if active else []
        if occ:
            start, end, what = min(occ)
            return Reason.STOP_STRING, what, k, text[:end if p.include_stop_str_in_output else start]
        if p.max_tokens is not None and n >= p.max_tokens:
            return Reason.MAX_TOKENS, None, k, text
        if num_prompt + n >= max_total:
            return Reason.CONTEXT_LIMIT, None, k, text
        if rd.enabled and brute_period([t for t, _ in tokens[:n]], rd.max_period, rd.min_repeats, rd.min_tokens):
            return Reason.REPETITION, None, k, text
    return None


# Token ids: eos (0, 1) and the stop/special ids (2-9) are rare, ordinary ids (10-49) common, so
# streams run long enough for text stops, limits and loops to happen (each is asserted below).
token_ids = st.integers(0, 199).map(lambda x: x if x < 10 else 10 + x % 40)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4) | st.sampled_from(["<S>", "\n\n", " ", "€"]),
                      max_size=5)
params = st.builds(
    SamplingParams, stop=stop_lists, stop_token_ids=st.lists(st.integers(2, 9), max_size=2),
    stop_presets=st.lists(st.sampled_from(["line", "paragraph"]), max_size=1),
    include_stop_str_in_output=st.booleans(), ignore_eos=st.booleans(), min_tokens=st.integers(0, 6),
    max_tokens=st.one_of(st.none(), st.integers(6, 40), st.integers(6, 24)),
    repetition_detection=st.builds(RepetitionDetection, enabled=st.booleans(), max_period=st.integers(1, 4),
                                   min_repeats=st.integers(2, 4), min_tokens=st.integers(1, 8)))


# Mostly filler that no stop is made of ("xyzw"), sometimes the stops' own alphabet.
FILLER = st.text(alphabet="xyzw", max_size=3)
delta_texts = st.one_of(FILLER, FILLER, FILLER, st.text(alphabet=ALPHABET, max_size=3))


@st.composite
def streams(draw, p: SamplingParams) -> list[tuple[int, str]]:
    """8-40 tokens; sometimes a looping id pattern; a stop string planted split across two deltas."""
    n = draw(st.integers(8, 40))
    if draw(st.integers(0, 3)) == 0:  # a loop: a short pattern repeated after a random head
        head = draw(st.lists(token_ids, max_size=6))
        pattern = draw(st.lists(st.integers(10, 49), min_size=1, max_size=4))
        ids = (head + pattern * n)[:n]
    else:
        ids = [draw(token_ids) for _ in range(n)]
    if p.stop_token_ids and draw(st.integers(0, 3)) == 0:  # a stop token planted (ids 2-9 alone are too rare)
        ids[draw(st.integers(0, n - 1))] = draw(st.sampled_from(p.stop_token_ids))
    deltas = [draw(delta_texts) for _ in range(n)]
    for _ in range(draw(st.integers(0, 2)) if p.stop else 0):
        stop = draw(st.sampled_from(p.stop))
        k = draw(st.integers(0, n - 2))
        cut = draw(st.integers(1, max(1, len(stop) - 1)))
        deltas[k] += stop[:cut]
        deltas[k + 1] = stop[cut:] + deltas[k + 1]
    return list(zip(ids, deltas))


@st.composite
def cases(draw):
    p = draw(params)
    return p, draw(streams(p))


def case_labels(p, tokens, term, fed) -> list[str]:
    """What one example reached (for the coverage assertion)."""
    labels = [term.reason.value]
    if term.reason is Reason.STOP_STRING and term.stop_reason in p.stop and "special token" not in term.detail:
        start = term.char_offset - (len(term.stop_reason) if p.include_stop_str_in_output else 0)
        labels.append("text stop across tokens" if start < len(fed) else "text stop within a token")
    if term.stop_reason in ("line", "paragraph"):
        labels.append("preset")
    return labels


@contextlib.contextmanager
def no_code_constants():
    """Hypothesis (6.131+) draws ~5% of its values from constants it finds in this project's loaded modules,
    so a derandomized run's examples depend on what else the session imported: after test_intent.py's
    imports, 1 of 400 examples ended in `repetition` instead of 9 and the coverage check below failed. While
    it runs, no project constants: the same 400 examples in every session."""
    from hypothesis.internal.conjecture import providers
    saved = getattr(providers, "_get_local_constants", None)
    if saved is None:                                   # an older Hypothesis: it draws no project constants
        yield
        return
    providers._get_local_constants = lambda: providers.Constants()
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = saved
        providers.CONSTANTS_CACHE.cache.clear()


def stopper_property(max_examples: int = 400, shrink: bool = True) -> Counter[str]:
    """The stopper against the reference; returns what the examples reached. shrink=False: a failure is
    reported as found (the meta test only needs to see one; shrinking it took ~40 s)."""
    reached: Counter[str] = Counter()
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)

    # derandomize: the coverage assertion below must not depend on the run (CI gets the same 400 examples)
    @settings(max_examples=max_examples, deadline=None, database=None, report_multiple_bugs=False, derandomize=True,
              phases=phases)
    @given(cases(), st.integers(0, 10), st.integers(1, 80), st.lists(st.booleans(), min_size=40, max_size=40))
    def check(case, num_prompt, window, release_now):
        p, tokens = case
        labels = one_example(p, tokens, num_prompt, window, release_now)
        for label in labels:
            event(label)
            reached[label] += 1
        reached["examples"] += 1

    with no_code_constants():
        check()
    return reached


def test_stopper_equals_reference_and_streaming_equals_final():
    reached = stopper_property()
    n = reached["examples"]
    for label in ("eos", "stop_token", "stop_string", "max_tokens", "context_limit", "repetition",
                  "text stop across tokens", "text stop within a token", "preset"):
        assert reached[label] >= 4, (label, reached)  # each is expected >= 12 times in 400
    assert reached["cancelled"] <= 0.4 * n, reached  # the old strategy: 50-60% ran out of tokens
    assert reached["tokens"] / n >= 5, reached     # mean tokens taken before the end (old: ~2.6)


class IgnoresCrossTokenMatches(SequenceStopper):
    """Named fault: a stop string that starts in an earlier token's text is not a stop (holdback intact)."""

    def _take_text(self, delta_text):
        before = self._fed
        return [m for m in super()._take_text(delta_text) if m.start >= before]


def test_property_catches_a_stopper_that_ignores_cross_token_matches(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "SequenceStopper", IgnoresCrossTokenMatches)
    with pytest.raises(AssertionError):
        stopper_property(max_examples=200, shrink=False)


def one_example(p, tokens, num_prompt, window, release_now) -> list[str]:
    max_total = num_prompt + window
    stopper = SequenceStopper(p, EOS, SPECIAL, num_prompt, max_total)
    streamed, term = [], None
    fed = ""
    for k, (tid, delta) in enumerate(tokens):
        masked = stopper.masked_token_ids()
        assert masked == (frozenset() if k >= p.min_tokens else
                          frozenset(p.stop_token_ids) | {SPECIAL[s] for s in p.stop if s in SPECIAL}
                          | (frozenset() if p.ignore_eos else EOS))
        term = stopper.on_token(tid, delta)
        if term is not None:
            break
        fed += delta
        if release_now[k]:
            streamed.append(stopper.release())
            # holdback is exactly what could still grow into a stop, no more
            assert len("".join(streamed)) == len(fed) - holdback(fed, p.stop, p.stop_presets)
    expected = reference(p, tokens, num_prompt, max_total)
    if term is None:
        assert expected is None
        term = stopper.terminate(Reason.CANCELLED, "client disconnected")
        expected = (Reason.CANCELLED, None, len(tokens) - 1, fed)
    streamed.append(stopper.finish(term))
    final = stopper.text
    assert (term.reason, term.stop_reason, term.token_index, final) == expected
    assert "".join(streamed) == final and term.char_offset == len(final)
    for i in range(1, len(streamed)):
        assert final.startswith("".join(streamed[:i]))
    assert stopper.num_output_tokens_kept == term.token_index + 1
    if p.max_tokens is not None:
        assert stopper.num_output_tokens_kept <= p.max_tokens
    if term.reason in (Reason.STOP_STRING, Reason.STOP_TOKEN, Reason.EOS):
        assert term.token_index + 1 >= p.min_tokens
    if p.min_tokens == 0:
        body = final  # the final text holds no stop string, except an included matched one
        token_stop = term.reason in (Reason.STOP_TOKEN, Reason.EOS) or term.stop_reason in SPECIAL
        if p.include_stop_str_in_output and token_stop:
            body = final[:len(final) - len(tokens[term.token_index][1])]  # the stop token's own text
        elif p.include_stop_str_in_output and term.reason is Reason.STOP_STRING and term.stop_reason in p.stop:
            assert final.endswith(term.stop_reason)
            body = final[:len(final) - len(term.stop_reason)]
        assert not any(s in body for s in p.stop)
    # the order of the stop list never matters
    again = SequenceStopper(SamplingParams(**{**_fields(p), "stop": tuple(reversed(p.stop))}), EOS, SPECIAL,
                            num_prompt, max_total)
    t2 = next((t for t in (again.on_token(*tok) for tok in tokens) if t is not None), None)
    assert (t2 is None) == (term.reason is Reason.CANCELLED)
    if t2 is not None:
        again.finish(t2)
        assert (t2.reason, t2.stop_reason, again.text) == (term.reason, term.stop_reason, final)
    return case_labels(p, tokens, term, fed) + ["tokens"] * (term.token_index + 1)


def _fields(p):
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def make(**kw):
    kw.setdefault("max_tokens", 100)
    return SequenceStopper(SamplingParams(**kw), EOS, SPECIAL, num_prompt_tokens=5, max_total_tokens=50)


def feed(stopper, pieces, start_id=10):
    for i, piece in enumerate(pieces):
        term = stopper.on_token(start_id + i, piece)
        if term is not None:
            return term
    return None


def test_earliest_start_wins_within_one_token():
    for stops in (["world", "o w"], ["o w", "world"]):
        s = make(stop=stops)
        term = feed(s, ["hell", "o world!"])
        s.finish(term)
        assert (s.text, term.stop_reason, term.char_offset, term.token_index) == ("hell", "o w", 4, 1)
        assert term.detail == 'stop string "o w" at char 4'


def test_stop_across_tokens_is_held_back_then_cut():
    s = make(stop=["\n\n"], include_stop_str_in_output=False)
    assert feed(s, ["Para one.", "\n"]) is None
    assert s.release() == "Para one."
    term = feed(s, ["\nPara two"])
    assert term.reason is Reason.STOP_STRING and term.finish_reason == "stop"
    assert s.finish(term) == "" and s.text == "Para one."


def test_include_stop_str_in_output_keeps_matched_stop():
    s = make(stop=["END"], include_stop_str_in_output=True)
    term = feed(s, ["a E", "N", "Dxyz"])
    assert s.finish(term) == "a END" and s.text == "a END"


def test_eos_on_the_token_that_hits_max_tokens_is_a_stop():
    s = make(max_tokens=3)
    assert feed(s, ["a", "b"]) is None
    term = s.on_token(1, "")
    assert (term.reason, term.finish_reason, term.token_index) == (Reason.EOS, "stop", 2)
    s = make(max_tokens=3)
    term = feed(s, ["a", "b", "c"])
    assert (term.reason, term.finish_reason, term.detail) == (Reason.MAX_TOKENS, "length", "max_tokens 3 reached")


def test_stop_string_on_the_token_that_hits_context_limit_is_a_stop():
    s = SequenceStopper(SamplingParams(stop=["!"], max_tokens=None), EOS, SPECIAL, 8, 10)
    assert feed(s, ["x"]) is None
    term = s.on_token(12, "y!")
    s.finish(term)
    assert (term.reason, s.text) == (Reason.STOP_STRING, "xy")
    s = SequenceStopper(SamplingParams(max_tokens=None), EOS, SPECIAL, 8, 10)
    assert feed(s, ["x", "y"]).reason is Reason.CONTEXT_LIMIT


def test_min_tokens_ignores_early_stops_then_counts_completed_ones():
    s = make(stop=["ab"], min_tokens=3)
    assert s.masked_token_ids() == EOS
    assert feed(s, ["ab"]) is None                  # "ab" complete at token 0 of 3: ignored
    assert s.on_token(0, "") is None                # eos at token 1 (if not masked): ignored too
    assert s.masked_token_ids() == EOS
    assert s.on_token(12, "a") is None
    assert s.masked_token_ids() == frozenset()
    term = s.on_token(13, "b")
    s.finish(term)
    assert (term.reason, term.token_index, s.text) == (Reason.STOP_STRING, 3, "ab")


def test_min_tokens_counts_stop_completed_at_the_threshold():
    s = make(stop=["ab"], min_tokens=2)
    assert s.on_token(10, "a") is None
    term = s.on_token(11, "b")                      # 2 output tokens exist: counts
    s.finish(term)
    assert (term.reason, s.text) == (Reason.STOP_STRING, "")


def test_special_token_stop_string_stops_on_token_id():
    s = make(stop=["<|im_end|>"], ignore_eos=True)
    assert feed(s, ["Hi"]) is None
    term = s.on_token(0, "")                        # special text removed by the detokenizer
    s.finish(term)
    assert (term.reason, term.stop_reason, s.text) == (Reason.STOP_STRING, "<|im_end|>", "Hi")


def test_stop_token_ids_and_eos_reasons():
    s = make(stop_token_ids=[7])
    term = feed(s, ["x"]) or s.on_token(7, "")
    assert (term.reason, term.stop_reason, term.layer.value) == (Reason.STOP_TOKEN, 7, "business")
    s = make()
    term = s.on_token(1, "")
    assert (term.reason, term.stop_reason, term.layer.value) == (Reason.EOS, None, "model")
    s = make(ignore_eos=True)
    assert s.on_token(1, "") is None


def test_repetition_stops_with_period_in_detail():
    s = make(repetition_detection=RepetitionDetection(max_period=8, min_repeats=4, min_tokens=8))
    term = None
    for i in range(30):
        term = s.on_token(20 + i % 3, "xyz"[i % 3])
        if term:
            break
    assert term.reason is Reason.REPETITION and term.detail == "period 3 repeated 4 times"
    assert s.finish(term) == "xyz" * 4


def test_presets_through_the_stopper():
    s = make(stop_presets=["json"])
    term = feed(s, ['Result: {"k": "}"', "}\nThanks"])
    s.finish(term)
    assert (s.text, term.stop_reason, term.detail) == ('Result: {"k": "}"}', "json", "stop preset json at char 18")
    s = SequenceStopper(SamplingParams(stop_presets=["turn"]), EOS, {"<|im_start|>": 5}, 1, 100,
                        turn_markers=["<|im_start|>", "\nUser:"])
    assert s.masked_token_ids() == frozenset() and feed(s, ["Bye."]) is None
    term = s.on_token(5, "")
    s.finish(term)
    assert (term.reason, term.stop_reason, s.text) == (Reason.STOP_STRING, "turn", "Bye.")


def test_finish_releases_holdback_for_limits_and_cancel():
    s = make(stop=["STOP"], max_tokens=2)
    assert feed(s, ["go ST"]) is None and s.release() == "go "
    term = s.on_token(11, "O")
    assert term.reason is Reason.MAX_TOKENS and s.finish(term) == "STO"
    s = make(stop=["STOP"])
    feed(s, ["ST"])
    term = s.terminate(Reason.TIMEOUT, "deadline passed")
    assert (term.token_index, term.char_offset, term.finish_reason) == (0, 2, "length")
    assert s.finish(term) == "ST" and s.finish(term) == "" and s.release() == ""
    with pytest.raises(RuntimeError):
        s.on_token(1, "")


# ---- SentencePiece pieces (the real Gemma 3 vocabulary): ▁ spaces and <0xNN> byte runs ------------------------
GEMMA_TEXT = "Hello world, this is 中文 and 𓀀𓀁 bytes.  Two  spaces then the end. More after."


@pytest.fixture(scope="module")
def gemma():
    from haltwise.models.catalog import resolve_model
    from haltwise.tokenizer.tokenizer import Tokenizer

    return Tokenizer.from_gguf(resolve_model("gemma3-270m", progress=None))


def _stream_gemma(tok, ids, **params):
    from haltwise.tokenizer.detokenizer import IncrementalDetokenizer

    stopper = SequenceStopper(SamplingParams(max_tokens=500, **params), tok.eos_token_ids(),
                              tok.special_token_texts(), num_prompt_tokens=1, max_total_tokens=1000)
    detok = IncrementalDetokenizer(tok)
    released, term = [], None
    for i in ids:
        term = stopper.on_token(i, detok.step([i]))
        if term is not None:
            break
        released.append(stopper.release())
    if term is None:  # end the text by eos, as a model would
        term = stopper.on_token(tok.eos_token_id, detok.flush()) or Termination(Reason.EOS, "eos ignored")
    released.append(stopper.finish(term))
    return "".join(released), released, term


@pytest.mark.parametrize("stop", ["world, this", "中文 and", "𓀁", "  spaces", "end.", "s."])
def test_stop_strings_over_sentencepiece_pieces(gemma, stop):
    ids = gemma.encode(GEMMA_TEXT, add_special_tokens=False)
    assert any(i in gemma.byte_fallback_ids for i in ids)  # 𓀀𓀁 are spelled by byte pieces
    text, chunks, term = _stream_gemma(gemma, ids, stop=[stop])
    assert term.reason == Reason.STOP_STRING and term.stop_reason == stop
    assert text == GEMMA_TEXT[:GEMMA_TEXT.index(stop)]
    assert all(stop not in c for c in chunks) and "\ufffd" not in text


def test_special_token_stop_and_eos_over_sentencepiece(gemma):
    ids = gemma.encode("Answer: yes", add_special_tokens=False) + [gemma.token_to_id("<end_of_turn>")]
    text, _, term = _stream_gemma(gemma, ids + gemma.encode(" never", add_special_tokens=False))
    assert (term.reason, text) == (Reason.EOS, "Answer: yes")  # <end_of_turn> is in Gemma's eos set
    text, _, term = _stream_gemma(gemma, ids, stop=["<end_of_turn>"], ignore_eos=True)
    assert (term.reason, term.stop_reason, text) == (Reason.STOP_STRING, "<end_of_turn>", "Answer: yes")
