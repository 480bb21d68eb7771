"""Harmony (gpt-oss): the reply's channels split on every output token, the think-section rule for its format.

gpt-oss writes its reply as messages, each a header then a body; the markers are special tokens:

    output:  <|channel|>analysis<|message|> reasoning ... <|end|>
             <|start|>assistant<|channel|>final<|message|> answer ... <|return|>
         or  <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|> {args} <|call|>
             (the recipient may also stand in the role part: <|start|>assistant to=functions.NAME<|channel|>...)

    phase:   AWAITING (a header) --<|message|>, channel analysis--> REASONING --<|end|>--> AWAITING ...
                                 --<|message|>, any other message--> ANSWER (to the end of the reply)

Header tokens and the markers belong to neither text. An analysis body is reasoning (several analysis messages
concatenate); the first other body is the answer: a `final` (or recipient-less `commentary`) body is content,
a body addressed `to=functions.NAME` is that call's arguments (`recipient`, which the tool-call layer maps
to tool_calls). Everything after the answer's first token is answer, as after </think>. The reasoning rules
of reasoning.py apply unchanged (budget and reasoning loops force <|end|>; EOS inside ends the request);
the prompt (`<|start|>assistant`) leaves the output in a header.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from haltwise.sampling_params import RepetitionDetection
from haltwise.stopping.reasoning import Phase, ReasoningSection, Role

START, CHANNEL, MESSAGE, END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
REASONING_CHANNEL = "analysis"
_RECIPIENT = re.compile(r"\bto=(\S+)")


@dataclass(frozen=True)
class Header:
    """A message header, read at its <|message|>."""

    channel: str | None            # the word after <|channel|> (None: no channel named)
    recipient: str | None          # to=... (e.g. "functions.get_weather"), wherever the header puts it

    @property
    def is_reasoning(self) -> bool:
        return self.channel == REASONING_CHANNEL and self.recipient is None


@dataclass(frozen=True)
class HarmonyMarkers:
    start_id: int
    channel_id: int
    message_id: int
    close_id: int                                          # <|end|>: closes a message (forced by budget / loops)
    special_ids: frozenset[int]                            # every special token: they split a header's parts
    decode: Callable[[list[int]], str] = field(compare=False, repr=False)   # text of non-special ids

    @classmethod
    def of(cls, tokenizer: Any) -> "HarmonyMarkers | None":
        """The markers of a harmony vocabulary (all four special tokens), else None."""
        ids = [tokenizer.token_to_id(t) for t in (START, CHANNEL, MESSAGE, END)]
        if any(i is None or i not in tokenizer.special_token_ids for i in ids):
            return None
        return cls(*ids, frozenset(tokenizer.special_token_ids),
                   decode=lambda toks: tokenizer.decode(toks, skip_special_tokens=True))

    def section(self, prompt_token_ids: Sequence[int], budget: int | None, detection: RepetitionDetection,
                end_token_ids: frozenset[int] = frozenset()) -> "HarmonySection":
        return HarmonySection(self, prompt_token_ids, budget, detection, end_token_ids)

    def header(self, token_ids: Sequence[int]) -> Header:
        """Channel and recipient of a header's tokens (markers included, the <|message|> excluded)."""
        parts: list[tuple[int | None, list[int]]] = [(None, [])]     # (marker before, text ids)
        for t in token_ids:
            if t in self.special_ids:
                parts.append((t, []))
            else:
                parts[-1][1].append(t)
        channel, recipient = None, None
        for marker, ids in parts:
            text = self.decode(ids) if ids else ""
            if marker == self.channel_id and channel is None:
                channel = (text.split() or [None])[0]
            found = _RECIPIENT.search(text)
            if found and recipient is None:
                recipient = found.group(1)
        return Header(channel, recipient)

    def prompt_phase(self, prompt_token_ids: Sequence[int]) -> Phase:
        return self.prompt_state(prompt_token_ids)[0]

    def prompt_state(self, prompt_token_ids: Sequence[int]) -> tuple[Phase, list[int], Header | None]:
        """(phase, header so far, header of an open body) where the prompt leaves the output: only the
        tokens after its last <|start|> count (the assistant turn being generated)."""
        tail: list[int] = []
        for t in reversed(prompt_token_ids):
            if t == self.start_id:
                break
            tail.append(t)
        tail.reverse()
        if self.message_id not in tail:
            return Phase.AWAITING, tail, None
        head = self.header(tail[:tail.index(self.message_id)])
        return (Phase.REASONING if head.is_reasoning else Phase.ANSWER), [], head


class HarmonySection(ReasoningSection):
    """The phase of one harmony reply: headers, analysis (reasoning), the answer; budget and loops as
    ReasoningSection. `recipient` is the answer message's to=... once its header is read."""

    def __init__(self, markers: HarmonyMarkers, prompt_token_ids: Sequence[int], budget: int | None,
                 detection: RepetitionDetection, end_token_ids: frozenset[int] = frozenset()):
        super().__init__(markers, prompt_token_ids, budget, detection, end_token_ids)  # type: ignore[arg-type]
        self.markers = markers
        _, self._header, head = markers.prompt_state(prompt_token_ids)
        self.channel = head.channel if head is not None else None
        self.recipient = head.recipient if head is not None and self.phase is Phase.ANSWER else None

    @property
    def grammar_applies(self) -> bool:
        """A grammar constrains the answer's body only (headers are the format's, not the answer's)."""
        return self.phase is Phase.ANSWER

    def on_token(self, token_id: int) -> Role:
        m = self.markers
        if self.phase is Phase.ANSWER:
            return Role.ANSWER
        if self.phase is Phase.AWAITING:
            if token_id in self.end_token_ids:
                return Role.END
            if token_id == m.start_id:
                self._header = []
            elif token_id == m.message_id:
                self._open(m.header(self._header))
            else:
                self._header.append(token_id)
            return Role.OPEN
        if token_id == m.close_id:
            self.phase, self.closing, self._header = Phase.AWAITING, False, []
            return Role.CLOSE
        return super().on_token(token_id)

    def _open(self, head) -> None:
        self._header, self.channel = [], head.channel
        if head.is_reasoning:
            self.phase, self.opened = Phase.REASONING, True
            self._check_budget()
        else:
            self.phase, self.recipient = Phase.ANSWER, head.recipient
