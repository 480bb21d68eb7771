"""A request's per-sequence state, built once at intake: the Sequence and everything that follows its output."""
from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch

from haltwise.engine.prompt_logprobs import PromptScores
from haltwise.engine.request_state import SeqOutputState
from haltwise.engine.sequence import Sequence
from haltwise.outputs import CompletionOutput
from haltwise.sampling_params import SamplingParams
from haltwise.stopping.harmony import HarmonyMarkers
from haltwise.stopping.reasoning import ReasoningTags
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.tokenizer.detokenizer import IncrementalDetokenizer
from haltwise.tokenizer.tokenizer import Tokenizer


class SeqBuilder:
    """Builds SeqOutputStates (stopper, detokenizers, generator, prompt scores, reasoning section); numbers
    sequences. Touches no engine state, so any thread may call build (AsyncEngine prepares requests off its thread)."""

    def __init__(self, tokenizer: Tokenizer, eos_token_ids: frozenset[int], special_token_texts: Mapping[str, int],
                 reasoning_tags: ReasoningTags | HarmonyMarkers | None, max_model_len: int):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.special_token_texts = special_token_texts
        self.reasoning_tags = reasoning_tags   # None: no think sections (split_reasoning is a no-op)
        self.max_model_len = max_model_len
        self._seq_ids = itertools.count()

    def build(self, request_id: str, prompt: list[int], params: SamplingParams, index: int,
              arrival: float, timeout: float | None) -> SeqOutputState:
        """The state of the request's index-th sequence (of params.n)."""
        seq = Sequence(next(self._seq_ids), request_id, prompt, params, max_total_tokens=self.max_model_len,
                       arrival_time=arrival, deadline=arrival + timeout if timeout else None)
        generator = None if params.seed is None else torch.Generator().manual_seed(params.seed + index)
        stopper = SequenceStopper(params, self.eos_token_ids, self.special_token_texts, len(prompt),
                                  self.max_model_len)   # the `turn` preset's markers: stopping/presets.py
        markers = params.tool_calls.marker_texts() if params.tool_calls is not None else ()
        keep = frozenset(i for i in map(self.tokenizer.token_to_id, markers) if i is not None)   # call frames
        state = SeqOutputState(seq, IncrementalDetokenizer(self.tokenizer, params.skip_special_tokens, keep), stopper,
                               generator, CompletionOutput(index=index),
                               logprobs=[] if params.logprobs is not None else None)
        if params.prompt_logprobs is not None and index == 0:   # siblings share the prompt: scored once
            state.scores = PromptScores(prompt, params.prompt_logprobs)
            seq.needs_prompt_logits = not state.scores.done
        if params.split_reasoning and self.reasoning_tags is not None:
            state.reasoning = self.reasoning_tags.section(prompt, params.max_reasoning_tokens,
                                                          params.repetition_detection,
                                                          frozenset() if params.ignore_eos else self.eos_token_ids)
            state.output.recipient = state.reasoning.recipient     # a prompt that opened the answer's body
            state.reasoning_detokenizer = IncrementalDetokenizer(self.tokenizer, params.skip_special_tokens)
        return state
