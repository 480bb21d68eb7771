"""SequenceStopper under a grammar: the completing token ends the sequence, with reason grammar."""
from __future__ import annotations

from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason
from haltwise.structured.spec import StructuredOutputs

EOS = frozenset({0})
SO = StructuredOutputs(json_object=True)


def stopper(**kw) -> SequenceStopper:
    kw.setdefault("repetition_detection", RepetitionDetection(enabled=False))
    kw.setdefault("max_tokens", 100)
    return SequenceStopper(SamplingParams(**kw), EOS, {}, 5, 1000)


def test_completing_token_ends_with_grammar_and_keeps_all_text() -> None:
    s = stopper(structured_outputs=SO)
    assert s.on_token(7, '{"a"') is None
    t = s.on_token(8, ": 1}", structure_complete="json_object")
    assert t.reason is Reason.GRAMMAR and t.finish_reason == "stop" and t.char_offset == len('{"a": 1}')
    assert t.detail == "json_object complete at token 1" and t.stop_reason is None
    s.finish(t)
    assert s.text == '{"a": 1}'


def test_grammar_wins_below_min_tokens() -> None:
    s = stopper(structured_outputs=SO, min_tokens=50)
    t = s.on_token(8, "{}", structure_complete="json_object")
    assert t is not None and t.reason is Reason.GRAMMAR


def test_end_token_closing_the_structure_is_grammar_not_eos() -> None:
    s = stopper(structured_outputs=StructuredOutputs(regex="[0-9]+"))
    assert s.on_token(5, "12") is None
    t = s.on_token(0, "", structure_complete="regex")
    assert t.reason is Reason.GRAMMAR and "end token 0" in t.detail and t.char_offset == 2


def test_stop_string_in_the_completing_token_still_wins() -> None:
    s = stopper(structured_outputs=SO, stop=("x",))
    t = s.on_token(9, '{"x": 1}', structure_complete="json_object")
    assert t.reason is Reason.STOP_STRING and t.stop_reason == "x" and t.char_offset == 2


def test_json_preset_is_off_under_a_grammar() -> None:
    with_grammar = stopper(structured_outputs=SO, stop_presets=("json",))
    assert with_grammar.on_token(9, '{"a": 1}') is None
    plain = stopper(stop_presets=("json",))
    t = plain.on_token(9, '{"a": 1}')
    assert t is not None and t.reason is Reason.STOP_STRING


def _loop_run(stop, tokens):
    """Feed (id, text) pairs; returns (termination, streamed text)."""
    streamed, term = "", None
    for tid, text in tokens:
        term = stop.on_token(tid, text)
        if term is not None:
            break
        streamed += stop.release()
    streamed += stop.finish(term)
    return term, streamed


def test_a_loop_under_a_grammar_is_cut_where_it_began_and_nothing_streamed_is_retracted() -> None:
    # '{"d": "a' then the pair ", b" repeated: period 2 -> kept up to the first copy
    head = [(1, '{"d": "'), (2, "a")]
    loop = [(3, " x"), (4, ",")] * 12
    s = stopper(structured_outputs=SO, repetition_detection=RepetitionDetection())
    term, streamed = _loop_run(s, head + loop)
    assert term.reason is Reason.REPETITION and "cut where it began" in term.detail
    assert s.text == '{"d": "a x,' and streamed == s.text
    assert s.num_output_tokens_kept == 4 and term.token_index == 3 and term.char_offset == len(s.text)


def test_without_a_grammar_the_loop_cut_keeps_the_repeats_as_before() -> None:
    s = stopper(repetition_detection=RepetitionDetection())
    term, streamed = _loop_run(s, [(1, "a")] + [(3, " x"), (4, ",")] * 12)
    assert term.reason is Reason.REPETITION and s.text.count(" x,") == 8 and streamed == s.text
