"""The harmony section (gpt-oss) on the token ids the tiny gpt-oss fixture's tokenizer makes of harmony text
(tests/models/converted.py: llama.cpp's converter, the real gpt-oss template and its special tokens)."""
from __future__ import annotations

import pytest

from haltwise.sampling_params import RepetitionDetection
from haltwise.stopping.harmony import HarmonyMarkers, HarmonySection
from haltwise.stopping.reasoning import Phase, ReasoningTags, Role
from haltwise.tokenizer.tokenizer import Tokenizer
from tests.models.converted import fixture, require_converter

OFF = RepetitionDetection(enabled=False)
ANALYSIS = "<|channel|>analysis<|message|>The user wants Paris. Easy.<|end|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.<|return|>"
CALL = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" \
       '{"city": "Paris"}<|call|>'
CALL_IN_ROLE = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}'


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    require_converter()
    return Tokenizer.from_gguf(fixture("gpt-oss").gguf("q8_0"))


@pytest.fixture(scope="module")
def markers(tok) -> HarmonyMarkers:
    m = HarmonyMarkers.of(tok)
    assert m is not None
    return m


def run(tok, markers, output: str, prompt: str = "<|start|>user<|message|>hi<|end|><|start|>assistant",
        budget=None) -> tuple[HarmonySection, str, str, list[Role]]:
    """(section, reasoning text, answer text, roles) of an output, fed token by token."""
    ids = tok.encode(output, add_special_tokens=False)
    s = markers.section(tok.encode(prompt, add_special_tokens=False), budget, OFF, tok.eos_token_ids())
    roles = [s.on_token(t) for t in ids]
    pick = lambda role: tok.decode([t for t, r in zip(ids, roles) if r is role], skip_special_tokens=True)  # noqa
    return s, pick(Role.REASONING), pick(Role.ANSWER), roles


def test_only_a_harmony_vocabulary_has_markers(tok) -> None:
    from tests.engine.tiny_qwen3 import qwen3_tokenizer
    assert HarmonyMarkers.of(qwen3_tokenizer()) is None and ReasoningTags.of(tok) is None


def test_analysis_is_reasoning_and_final_is_the_answer(tok, markers) -> None:
    s, reasoning, answer, roles = run(tok, markers, ANALYSIS + FINAL)
    assert (reasoning, answer) == ("The user wants Paris. Easy.", "It is sunny in Paris.")
    assert s.recipient is None and s.channel == "final" and s.in_answer and s.opened
    assert roles[-1] is Role.ANSWER           # <|return|> reaches the answer's checks: it is the eos that ends it
    assert s.num_reasoning_tokens == len(tok.encode("The user wants Paris. Easy.", add_special_tokens=False))


def test_a_commentary_call_is_an_answer_addressed_to_the_function(tok, markers) -> None:
    s, reasoning, answer, _ = run(tok, markers, ANALYSIS + CALL)
    assert (reasoning, answer, s.recipient, s.channel) == ("The user wants Paris. Easy.", '{"city": "Paris"}',
                                                            "functions.get_weather", "commentary")
    s, reasoning, answer, _ = run(tok, markers, CALL_IN_ROLE[len("<|start|>assistant"):])   # to= in the role part
    assert (reasoning, answer, s.recipient) == ("", '{"city": "Rome"}', "functions.get_weather")


def test_headers_and_markers_are_in_neither_text(tok, markers) -> None:
    two = ANALYSIS + "<|start|>assistant<|channel|>analysis<|message|> More.<|end|>" + FINAL
    _, reasoning, answer, roles = run(tok, markers, two)
    assert (reasoning, answer) == ("The user wants Paris. Easy. More.", "It is sunny in Paris.")
    assert roles.count(Role.CLOSE) == 2


def test_an_end_token_inside_a_header_or_the_analysis_ends_it(tok, markers) -> None:
    _, _, _, roles = run(tok, markers, "<|channel|>analysis<|message|>Hm<|return|>")
    assert roles[-1] is Role.END
    s, _, _, roles = run(tok, markers, "<|channel|><|return|>")
    assert roles[-1] is Role.END and s.phase is Phase.AWAITING and s.note() == ""


def test_the_budget_forces_end_after_exactly_n_reasoning_tokens(tok, markers) -> None:
    s, _, _, _ = run(tok, markers, "<|channel|>analysis<|message|>one two three four", budget=2)
    assert s.num_reasoning_tokens == 4 and s.closing and s.forced_token_id == markers.close_id
    s, _, _, _ = run(tok, markers, "<|channel|>analysis<|message|>one two", budget=2)
    assert s.forced_token_id == tok.token_to_id("<|end|>")
    assert s.on_token(markers.close_id) is Role.CLOSE and s.phase is Phase.AWAITING and s.forced_token_id is None
    assert "closed the reasoning after 2 reasoning tokens" in s.note()


def test_the_prompt_decides_where_the_output_starts(tok, markers) -> None:
    s, reasoning, answer, _ = run(tok, markers, "Sunny.<|return|>",
                                  prompt="<|start|>assistant<|channel|>final<|message|>")
    assert (reasoning, answer, s.phase) == ("", "Sunny.", Phase.ANSWER)
    s, reasoning, _, _ = run(tok, markers, "Hm.<|end|>", prompt="<|start|>assistant<|channel|>analysis<|message|>")
    assert reasoning == "Hm." and s.phase is Phase.AWAITING
    s, _, answer, _ = run(tok, markers, '{"a": 1}', prompt=CALL_IN_ROLE.rpartition("{")[0])
    assert (answer, s.recipient) == ('{"a": 1}', "functions.get_weather")


def test_grammar_waits_for_the_answer_body(tok, markers) -> None:
    s = markers.section(tok.encode("<|start|>assistant", add_special_tokens=False), None, OFF)
    ids = tok.encode(ANALYSIS + FINAL, add_special_tokens=False)
    applies = []
    for t in ids:
        applies.append(s.grammar_applies)
        s.on_token(t)
    first_answer = ids.index(tok.token_to_id("<|message|>"), ids.index(tok.token_to_id("<|start|>"))) + 1
    assert applies.index(True) == first_answer and all(applies[first_answer:])
