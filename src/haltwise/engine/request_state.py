"""Per-sequence output state: detokenizer, stopper, seed generator and the output being built."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import torch

from haltwise.engine.prompt_logprobs import PromptScores
from haltwise.engine.sampler import SamplingRow
from haltwise.engine.sequence import Sequence
from haltwise.engine.speculation import PromptLookup
from haltwise.outputs import CompletionOutput, RequestOutput, TokenLogprob
from haltwise.stopping.reasoning import ReasoningSection, Role
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.structure_contract import settle
from haltwise.structured.backend import Matcher
from haltwise.structured.closing import json_path
from haltwise.stopping.termination import Layer, Reason, Termination
from haltwise.tokenizer.detokenizer import IncrementalDetokenizer
from haltwise.toolcalls.formats.harmony import call_text as harmony_call_text


# Endings that cut the text wherever it was: held-back text is released, incomplete UTF-8 included.
_CUT_REASONS = frozenset({Reason.MAX_TOKENS, Reason.CONTEXT_LIMIT, Reason.TIMEOUT, Reason.REPETITION, Reason.ERROR})


@dataclass
class SeqOutputState:
    """Everything about one sequence that is not plain scheduler data."""

    seq: Sequence
    detokenizer: IncrementalDetokenizer
    stopper: SequenceStopper
    generator: torch.Generator | None
    output: CompletionOutput
    logprobs: list[TokenLogprob] | None = None
    matcher: Matcher | None = None       # the grammar position, when the request asks for a structure
    reasoning: ReasoningSection | None = None   # a think section split from the answer (stopping/reasoning.py)
    reasoning_detokenizer: IncrementalDetokenizer | None = None
    lookup: PromptLookup | None = None   # n-gram index for speculative drafts, built at the first proposal
    scores: PromptScores | None = None   # the prompt's logprobs, when asked (the request's first sequence only)
    draft_source: str | None = None      # who proposed this step's drafts: "model", "lookup" (speculation.py)
    draft_length: int = 0                # the draft model's adaptive draft length (0: not drafted yet)
    closing: tuple[list[int], str] | None = None   # a forced close: (token ids, text) written after the cut

    def sampling_row(self) -> SamplingRow:
        forced = self.reasoning.forced_token_id if self.reasoning is not None else None
        return SamplingRow(self.seq.params, self.seq.prompt_token_ids, self.seq.output_token_ids,
                           self.stopper.masked_token_ids(), self.generator, forced)

    @property
    def grammar_applies(self) -> bool:
        """The grammar constrains this sequence's next token (never inside reasoning or a forced close)."""
        return self.matcher is not None and (self.reasoning is None or self.reasoning.grammar_applies)

    def on_token(self, token_id: int, logprob: TokenLogprob | None) -> Termination | None:
        """Append one sampled token and run every termination check; releases safe text to the output."""
        self.seq.append_token(token_id)
        self.output.delta_token_ids.append(token_id)
        if self.logprobs is not None and logprob is not None:
            self.logprobs.append(logprob)
        role = self.reasoning.on_token(token_id) if self.reasoning is not None else Role.ANSWER
        if role is not Role.ANSWER:
            self._on_reasoning_token(token_id, role)
            return self.stopper.on_token(token_id, "", answer=False)
        complete, rejected = None, ""
        if self.matcher is not None:  # advanced with every answer token (preemption keeps tokens: no rollback)
            if not self.matcher.consume(token_id):
                rejected = self.matcher.error or "token not allowed"
            elif self.matcher.is_complete:
                complete = self.matcher.spec.describe()
        termination = self.stopper.on_token(token_id, self.detokenizer.step([token_id]), complete)
        if termination is not None and termination.reason is Reason.REPETITION and self.matcher is not None \
                and not self.matcher.is_complete and not rejected:
            termination = self._close_structure(termination)
        elif termination is not None and termination.reason is Reason.TOOL_LOOP and self.matcher is not None \
                and not rejected:
            termination = self._close_section(termination)
        if termination is None and rejected:
            return Termination(Reason.ERROR, f"grammar rejected token {token_id}: {rejected}")
        if termination is None:
            self._release(self.stopper.release())
        return termination

    def _close_structure(self, termination: Termination) -> Termination:
        """A loop inside a structure: back the matcher up to the stopper's cut and write the grammar's
        shortest completion there (structured/closing.py). Nothing found: the cut stays incomplete."""
        ids, text = self._write_close() or ([], "")
        if not ids:          # none found, or the grammar could already end there (free text around tool calls)
            return termination
        where = json_path(self.stopper.text_through_cut())
        return replace(termination, forced_close=True,
                       detail=f"{termination.detail}; closed {where} with {json.dumps(text)} (the grammar's shortest "
                              f"completion)")

    def _close_section(self, termination: Termination) -> Termination:
        """A tool_loop cut after a complete call inside a section that goes on (a separator format: `[{...}, `):
        the grammar's shortest completion there is the section's own suffix -- no value is the server's, so
        this is no forced close."""
        tool_calls = self.seq.params.tool_calls
        if tool_calls is None or not tool_calls.parse(self.stopper.text_through_cut()).open:
            return termination
        ids, text = self._write_close() or ([], "")
        return replace(termination, detail=f"{termination.detail}; section closed with {json.dumps(text)}") \
            if ids else termination

    def _write_close(self) -> tuple[list[int], str] | None:
        """Back the matcher up to the stopper's cut and take the grammar's shortest completion there as
        self.closing (token ids, text); None when there is none."""
        assert self.matcher is not None
        dropped = self.seq.num_output_tokens - self.stopper.num_output_tokens_kept
        close = getattr(self.matcher, "close", None)
        if close is None or not self.matcher.rollback(dropped):
            return None
        ids = close(self.stopper.text_through_cut())
        if ids is None:
            return None
        text = self.detokenizer.tokenizer.decode(ids) if ids else ""
        self.closing = (ids, text)
        return self.closing

    def _on_reasoning_token(self, token_id: int, role: Role) -> None:
        """Reasoning text is released at once (no stop acts on it); a tag's text goes nowhere."""
        assert self.reasoning is not None and self.reasoning_detokenizer is not None
        if role is Role.REASONING:
            self._release_reasoning(self.reasoning_detokenizer.step([token_id]))
        elif role is Role.CLOSE:
            self._release_reasoning(self.reasoning_detokenizer.flush())
        self.output.num_reasoning_tokens = self.reasoning.num_reasoning_tokens
        self.output.recipient = self.reasoning.recipient

    def _release_reasoning(self, text: str) -> None:
        if text:
            self.output.delta_reasoning_text += text
            self.output.reasoning_text += text

    def finish(self, termination: Termination) -> Termination:
        """Final text and tokens: cut after the stop, flush what was held back (nothing is sent after a cancel).

        System-layer endings (timeout, cancel, error) get their token_index / char_offset filled in here:
        the cut is wherever the text ended. Returns the final termination record.
        """
        kept = self.stopper.num_output_tokens_kept
        dropped = self.seq.num_output_tokens - kept
        if dropped > 0:
            self.seq.truncate_output(kept)
            del self.output.delta_token_ids[max(0, len(self.output.delta_token_ids) - dropped):]
            if self.logprobs is not None:
                del self.logprobs[kept:]
        rest = self.stopper.finish(termination)
        if termination.reason in _CUT_REASONS and not self.stopper.text_was_cut:
            rest += self.detokenizer.flush()   # incomplete UTF-8 at a cut end decodes as decode() would
        text_was_cut = self.stopper.text_was_cut
        if self.closing is not None:        # the server's closing tokens, after the model's text
            ids, closing_text = self.closing
            rest += closing_text
            for token_id in ids:
                self.seq.append_token(token_id)
                self.output.delta_token_ids.append(token_id)
                if self.logprobs is not None:   # forced: the only token the closer would write
                    self.logprobs.append(TokenLogprob(token_id, 0.0))
            text_was_cut = False                # the matcher was backed up to the cut
        if termination.reason is not Reason.CANCELLED:
            self._release(rest)
            if self.reasoning is not None and not self.reasoning.in_answer and self.reasoning_detokenizer is not None:
                self._release_reasoning(self.reasoning_detokenizer.flush())   # ended inside: as decode() would
        note = self.reasoning.note() if self.reasoning is not None else ""
        if note:
            termination = replace(termination, detail=f"{termination.detail}; {note}" if termination.detail else note)
        # The record points at what the user actually got.
        token_index = self.seq.num_output_tokens - 1 if termination.layer is Layer.SYSTEM else termination.token_index
        termination = replace(termination, token_index=token_index, char_offset=len(self.output.text))
        final_text = self.stopper.text + (self.closing[1] if self.closing is not None else "")
        if self.output.recipient is not None:    # a harmony call: its arguments, read as the call they are
            final_text = harmony_call_text(self.output.recipient, final_text)
        termination = settle(termination, self.seq.params, self.matcher, final_text, text_was_cut)
        self.output.termination = termination
        return termination

    def _release(self, text: str) -> None:
        if text:
            self.output.delta_text += text
            self.output.text += text

    def take_update(self) -> CompletionOutput:
        """A snapshot with this step's deltas; the deltas are then reset."""
        out = self.output
        snapshot = CompletionOutput(
            index=out.index, text=out.text, token_ids=list(self.seq.output_token_ids), delta_text=out.delta_text,
            delta_token_ids=list(out.delta_token_ids), termination=out.termination,
            logprobs=list(self.logprobs) if self.logprobs is not None else None,
            delta_logprobs=self.logprobs[len(self.logprobs) - len(out.delta_token_ids):] if self.logprobs is not None else None,
            reasoning_text=out.reasoning_text, delta_reasoning_text=out.delta_reasoning_text,
            num_reasoning_tokens=out.num_reasoning_tokens, recipient=out.recipient,
            num_draft_tokens=self.seq.num_draft_tokens,
            num_accepted_draft_tokens=self.seq.num_accepted_draft_tokens,
        )
        out.delta_text, out.delta_token_ids, out.delta_reasoning_text = "", [], ""
        return snapshot


@dataclass
class RequestState:
    request_id: str
    prompt_token_ids: list[int]
    seqs: list[SeqOutputState]
    num_truncated_prompt_tokens: int = 0
    dirty: bool = False                  # something to report since the last update
    reported_finished: bool = False

    @property
    def finished(self) -> bool:
        return all(s.seq.is_finished for s in self.seqs)

    def take_update(self) -> RequestOutput:
        self.dirty = False
        first = [s.seq.first_token_time for s in self.seqs if s.seq.first_token_time is not None]
        arrival = self.seqs[0].seq.arrival_time
        finish = [s.seq.finish_time for s in self.seqs if s.seq.finish_time is not None]
        started = [s.seq.first_scheduled_time for s in self.seqs if s.seq.first_scheduled_time is not None]
        out = RequestOutput(
            request_id=self.request_id, prompt_token_ids=self.prompt_token_ids,
            outputs=[s.take_update() for s in self.seqs],
            num_truncated_prompt_tokens=self.num_truncated_prompt_tokens,
            num_cached_tokens=self.seqs[0].seq.num_cached_tokens,
            num_tier_tokens=dict(self.seqs[0].seq.num_tier_tokens),
            first_token_latency=(min(first) - arrival) if first else None,
            queue_time=(min(started) - arrival) if started else None,
            latency=(max(finish) - arrival) if self.finished and finish else None,
            prompt_logprobs=list(scores.logprobs) if (scores := self.seqs[0].scores) and scores.done else None,
        )
        self.reported_finished = out.finished
        return out
