"""The reasoning section's phase rule, budget and loop cut, on token ids alone (no model)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from haltwise.sampling_params import RepetitionDetection
from haltwise.stopping.reasoning import Phase, ReasoningSection, ReasoningTags, Role

OPEN, CLOSE = 900, 901
TAGS = ReasoningTags(OPEN, CLOSE)
ON, OFF = RepetitionDetection(), RepetitionDetection(enabled=False)


def section(prompt=(1, 2, 3), budget=None, detection=OFF) -> ReasoningSection:
    return ReasoningSection(TAGS, list(prompt), budget, detection)


def feed(s: ReasoningSection, tokens) -> list[Role]:
    return [s.on_token(t) for t in tokens]


def test_prompt_decides_where_the_output_starts() -> None:
    assert TAGS.prompt_phase([5, 6]) is Phase.AWAITING                       # Qwen3 default: the model may open
    assert TAGS.prompt_phase([5, OPEN, 7]) is Phase.REASONING                # DeepSeek-R1 style: opened in the prompt
    assert TAGS.prompt_phase([5, OPEN, 7, CLOSE, 8]) is Phase.ANSWER         # enable_thinking false: closed
    assert TAGS.prompt_phase([OPEN, CLOSE, 9, OPEN]) is Phase.REASONING      # only the last tag counts
    marked = ReasoningTags(OPEN, CLOSE, frozenset({1}))                      # 1: a role marker (<|im_start|>)
    assert marked.prompt_phase([5, OPEN, 1, 7]) is Phase.AWAITING            # a tag before this turn: not ours
    assert marked.prompt_phase([5, 1, 7, OPEN, 8]) is Phase.REASONING


def test_roles_of_a_section_the_model_opens_and_closes() -> None:
    s = section()
    assert feed(s, [OPEN, 10, 11, CLOSE, 12, OPEN]) == [Role.OPEN, Role.REASONING, Role.REASONING, Role.CLOSE,
                                                        Role.ANSWER, Role.ANSWER]   # a later <think> is answer text
    assert s.num_reasoning_tokens == 2 and s.in_answer and s.note() == "" and s.forced_token_id is None


def test_a_first_token_that_is_not_the_open_tag_is_answer() -> None:
    s = section()
    assert feed(s, [10, OPEN, 11]) == [Role.ANSWER] * 3 and not s.opened


def test_budget_forces_the_close_after_exactly_n_reasoning_tokens() -> None:
    s = section(budget=3)
    assert feed(s, [OPEN, 10, 11]) == [Role.OPEN, Role.REASONING, Role.REASONING] and s.forced_token_id is None
    assert s.on_token(12) is Role.REASONING and s.forced_token_id == CLOSE        # the 3rd: close is next
    assert s.on_token(CLOSE) is Role.CLOSE and s.forced_token_id is None and s.in_answer
    assert "budget of 3 tokens" in s.note() and "after 3 reasoning tokens" in s.note()


def test_budget_zero_closes_at_once_also_when_the_prompt_opened_the_section() -> None:
    s = section(budget=0)
    assert s.on_token(OPEN) is Role.OPEN and s.forced_token_id == CLOSE
    opened = section(prompt=[1, OPEN], budget=0)
    assert opened.forced_token_id == CLOSE and opened.on_token(CLOSE) is Role.CLOSE


def test_a_loop_inside_the_reasoning_closes_it() -> None:
    s = section(detection=ON)
    roles = feed(s, [OPEN] + [10, 11] * 8)          # period 2 x 8 = 16 tokens: the detector's defaults
    assert roles[-1] is Role.REASONING and s.forced_token_id == CLOSE
    assert "loop inside the reasoning (period 2" in s.cut
    s.on_token(CLOSE)
    assert s.note().startswith("the engine closed the reasoning after 16 reasoning tokens")


def test_loop_detection_off_means_no_loop_cut() -> None:
    s = section(detection=OFF)
    feed(s, [OPEN] + [10, 11] * 40)
    assert s.forced_token_id is None


def test_note_when_the_request_ends_inside_the_reasoning() -> None:
    s = section(budget=2)
    feed(s, [OPEN, 10, 11])
    assert s.note().startswith("the request ended inside the reasoning (2 reasoning tokens, no answer;")


@pytest.mark.parametrize("template, ids, has_tags", [
    ("{{ '<think>' }}", {"<think>": 5, "</think>": 6}, True),
    ("chatml", {"<think>": 5, "</think>": 6}, False),        # the template never opens a section
    ("{{ '<think>' }}", {"<think>": 5}, False),               # no single close token
])
def test_tags_need_the_template_and_both_single_tokens(template, ids, has_tags) -> None:
    tok = SimpleNamespace(chat_template=SimpleNamespace(source=template), token_to_id=ids.get,
                          special_token_ids=frozenset({1}))
    assert (ReasoningTags.of(tok) is not None) is has_tags


def test_an_end_token_inside_reasoning_is_not_reasoning() -> None:
    s = ReasoningSection(TAGS, [1], None, OFF, end_token_ids=frozenset({2}))
    assert feed(s, [OPEN, 10, 2]) == [Role.OPEN, Role.REASONING, Role.END] and s.num_reasoning_tokens == 1
