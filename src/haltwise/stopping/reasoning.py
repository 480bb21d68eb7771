"""The reasoning section: a phase rule run on every output token, before the answer's termination checks.

A model whose chat template opens a think section (Qwen3, QwQ, DeepSeek-R1 distills) writes

    output:  [<think>] reasoning ...... </think> answer ......
              ^ sampled, or already at the end of the prompt

    phase:   AWAITING --<think>--> REASONING --</think>--> ANSWER
                 \\--any other first token (it is answer)-----^
             REASONING from the start when the prompt ends inside an open section (last <think> after
             the last </think>); ANSWER from the start when the prompt closed it (enable_thinking false).

The tags are single tokens of the model's vocabulary (ReasoningTags); a model without them, or whose
template never writes `<think>`, gets no section at all. Tag tokens belong to neither text.

Inside REASONING only EOS and the limits (max_tokens, context window, deadline) end the request: stop
strings, stop token ids, presets, whole-word stops and grammars act on the answer only, and the loop
detectors of the answer never see reasoning tokens. Two rules end the *reasoning* instead: the budget
(max reasoning tokens) and a loop inside the reasoning (this section's own detectors, with the request's
repetition_detection settings). Either marks the section `closing`; the engine then forces the close tag
as the next token (`forced_token_id`) and the answer continues. `note()` says so for the termination
detail. Budget rule: exactly `budget` reasoning tokens (tags not counted) precede the forced close.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from haltwise.sampling_params import RepetitionDetection
from haltwise.stopping.loops import RepetitionDetector
from haltwise.stopping.near_loops import NearLoopDetector

OPEN_TAG, CLOSE_TAG = "<think>", "</think>"


class Phase(Enum):
    AWAITING = "awaiting"     # the first output token may open the section
    REASONING = "reasoning"
    ANSWER = "answer"


class Role(Enum):
    """What one output token is."""

    OPEN = "open"             # the <think> tag
    REASONING = "reasoning"
    CLOSE = "close"           # the </think> tag (sampled or forced)
    END = "end"               # an end-of-generation token inside the reasoning (it ends the request)
    ANSWER = "answer"


@dataclass(frozen=True)
class ReasoningTags:
    open_id: int
    close_id: int
    turn_marker_ids: frozenset[int] = frozenset()   # special tokens (role markers): the prompt scan stops there

    @classmethod
    def of(cls, tokenizer: Any) -> "ReasoningTags | None":
        """The model's think tags, or None when its template never opens a section or a tag is not one token."""
        template = getattr(tokenizer.chat_template, "source", "") if tokenizer.chat_template else ""
        open_id, close_id = tokenizer.token_to_id(OPEN_TAG), tokenizer.token_to_id(CLOSE_TAG)
        if OPEN_TAG not in template or open_id is None or close_id is None:
            return None
        return cls(open_id, close_id, frozenset(tokenizer.special_token_ids))

    def section(self, prompt_token_ids: Sequence[int], budget: int | None, detection: RepetitionDetection,
                end_token_ids: frozenset[int] = frozenset()) -> "ReasoningSection":
        """One sequence's section (harmony.HarmonyMarkers.section is the same call for gpt-oss)."""
        return ReasoningSection(self, prompt_token_ids, budget, detection, end_token_ids)

    def prompt_phase(self, prompt_token_ids: Sequence[int]) -> Phase:
        """Where the prompt leaves the output: inside an open section, after a closed one, or undecided.

        Only the assistant turn being generated counts (the tokens after the last special token, e.g.
        <|im_start|>): a tag in earlier turns, or typed in a user message, never opens this output's section.
        """
        for token in reversed(prompt_token_ids):
            if token == self.open_id:
                return Phase.REASONING
            if token == self.close_id:
                return Phase.ANSWER
            if token in self.turn_marker_ids:
                break
        return Phase.AWAITING


class ReasoningSection:
    """The phase of one sequence's output, its reasoning budget and its reasoning-loop detectors."""

    def __init__(self, tags: ReasoningTags, prompt_token_ids: Sequence[int], budget: int | None,
                 detection: RepetitionDetection, end_token_ids: frozenset[int] = frozenset()):
        self.tags = tags
        self.end_token_ids = end_token_ids        # eos set (empty under ignore_eos): never reasoning text
        self.phase = tags.prompt_phase(prompt_token_ids)
        self.budget = budget                      # max reasoning tokens; None = no budget
        self.num_reasoning_tokens = 0
        self.opened = self.phase is Phase.REASONING   # a section was (or is) open in this output
        self.closing = False                      # the engine forces the close tag next
        self.cut: str | None = None               # why the engine closed the section, once it did
        self.recipient: str | None = None         # whom the answer is addressed to (harmony tool calls only)
        d = detection
        self._loops = RepetitionDetector(d.max_period, d.min_repeats, d.min_tokens) if d.enabled else None
        self._near = (NearLoopDetector(d.near_loop_ngram, d.near_loop_window, d.near_loop_max_novelty)
                      if d.enabled and d.near_loops else None)
        self._check_budget()

    @property
    def in_answer(self) -> bool:
        return self.phase is Phase.ANSWER

    @property
    def grammar_applies(self) -> bool:
        """A grammar constrains the next token: in the answer, and (open tag allowed too) while awaiting."""
        return self.phase is not Phase.REASONING

    @property
    def forced_token_id(self) -> int | None:
        return self.tags.close_id if self.closing else None

    def on_token(self, token_id: int) -> Role:
        """Advance by one output token; returns the token's role."""
        if self.phase is Phase.AWAITING:
            if token_id == self.tags.open_id:
                self.phase, self.opened = Phase.REASONING, True
                self._check_budget()
                return Role.OPEN
            self.phase = Phase.ANSWER
        if self.phase is Phase.ANSWER:
            return Role.ANSWER
        if token_id == self.tags.close_id:
            self.phase, self.closing = Phase.ANSWER, False
            return Role.CLOSE
        if token_id in self.end_token_ids:
            return Role.END
        self.num_reasoning_tokens += 1
        if not self.closing:
            self._check_loop(token_id)
        if not self.closing:
            self._check_budget()
        return Role.REASONING

    def _check_budget(self) -> None:
        if self.phase is Phase.REASONING and self.budget is not None and self.num_reasoning_tokens >= self.budget:
            self.closing = True
            self.cut = f"the reasoning budget of {self.budget} tokens was spent"

    def _check_loop(self, token_id: int) -> None:
        period = self._loops.append(token_id) if self._loops is not None else None
        near = self._near.append(token_id) if self._near is not None else False
        if period is not None:
            assert self._loops is not None
            self.closing = True
            self.cut = f"a loop inside the reasoning (period {period} repeated {self._loops.repeats(period)} times)"
        elif near:
            assert self._near is not None
            self.closing = True
            self.cut = (f"a near-loop inside the reasoning (only {self._near.novelty:.0%} of the last "
                        f"{self._near.window} {self._near.ngram}-grams new)")

    def note(self) -> str:
        """What the termination detail says about the reasoning ("" when the model closed it itself)."""
        n = self.num_reasoning_tokens
        if self.phase is Phase.REASONING:
            why = f"; {self.cut}, the close was due next" if self.cut else ""
            return f"the request ended inside the reasoning ({n} reasoning tokens, no answer{why})"
        if self.cut:
            return f"the engine closed the reasoning after {n} reasoning tokens: {self.cut}; the answer followed"
        return ""
