"""The engine: add_request / abort / step over plain data. A step is schedule -> run -> postprocess."""
from __future__ import annotations

import logging
import threading
import time

import torch

from haltwise.config import EngineConfig, ModelConfig
from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.engine_stats import EngineStats, describe_engine, engine_stats
from haltwise.engine.faults import maybe_wrap
from haltwise.engine.grammar_masks import GrammarMasks
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches
from haltwise.engine.model_runner import BatchRow, ModelRunner
from haltwise.engine.page_commit import PageCommit
from haltwise.engine.pool_growth import PoolGrowth
from haltwise.engine.prompt_checks import check_prompt
from haltwise.engine.request_state import RequestState, SeqOutputState
from haltwise.engine.sampler import Sampler
from haltwise.engine.admission import AdmissionError
from haltwise.engine.scheduler import Scheduler
from haltwise.engine.seq_builder import SeqBuilder
from haltwise.engine.sequence import Sequence
from haltwise.engine.prompt_logprobs import score_prompts
from haltwise.engine.speculation import Speculator, speculation_unsupported
from haltwise.engine.step_cost import StepCost
from haltwise.engine.window_blocks import WindowBlocks
from haltwise.errors import InvalidRequest, Overloaded, RequestTooLarge
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.stopping.harmony import HarmonyMarkers
from haltwise.stopping.reasoning import ReasoningTags
from haltwise.stopping.termination import Reason, Termination
from haltwise.structured.bitmask import GrammarMask
from haltwise.structured.llguidance_backend import LLGuidanceBackend
from haltwise.structured.spec import StructureError
from haltwise.tokenizer.tokenizer import Tokenizer

log = logging.getLogger("haltwise.engine")


class LLMEngine:
    def __init__(self, model: torch.nn.Module, model_config: ModelConfig, tokenizer: Tokenizer,
                 engine_config: EngineConfig, max_model_len: int, generation_eos_ids: tuple[int, ...] = (),
                 default_timeout: float | None = None,
                 kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                 kv_commit: PageCommit | None = None, draft=None):
        """draft: a DraftModel (engine/draft_model.py) proposing speculative drafts, or None.
        kv_caches: the pool of KVBudget.of_engine(...), already allocated; None allocates and commits it
        here. kv_commit: the PageCommit committing kv_caches' pages, whose blocks become usable as they are
        committed (pool_growth.py); None: kv_caches is committed already."""
        self.model = model
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.config = engine_config
        self.max_model_len = max_model_len
        self.default_timeout = default_timeout
        self.eos_token_ids = tokenizer.eos_token_ids(tuple(generation_eos_ids) + tuple(model_config.eos_token_ids))
        self.special_token_texts = tokenizer.special_token_texts()
        # think tags, or harmony's channels (gpt-oss); None: no sections (split_reasoning is a no-op)
        self.reasoning_tags = HarmonyMarkers.of(tokenizer) or ReasoningTags.of(tokenizer)
        self.seq_builder = SeqBuilder(tokenizer, self.eos_token_ids, self.special_token_texts, self.reasoning_tags,
                                      max_model_len)
        self.budget = KVBudget.of_engine(model_config, engine_config, max_model_len)
        if self.budget.num_blocks < 1:
            raise ValueError(f"kv_cache_memory {engine_config.kv_cache_memory} bytes is less than one block")
        window = (WindowBlocks(self.budget.window_blocks, engine_config.block_size, model_config.sliding_window)
                  if self.budget.window_blocks else None)
        self.allocator = BlockAllocator(self.budget.num_blocks, engine_config.block_size,
                                        engine_config.enable_prefix_caching and window is None, window,
                                        usable_blocks=0 if kv_commit else None)
        self.step_cost = StepCost()   # this host's step times, learnt from the steps run: sizes prefill chunks
        self.scheduler = Scheduler(engine_config, self.allocator, max_model_len, step_cost=self.step_cost)
        self.pool_growth = None
        if kv_commit is not None:    # the sliding layers' pool is sized never to run dry: all of it, now
            kv_commit.wait(rows=self.budget.window_blocks)
            self.pool_growth = PoolGrowth(kv_commit, self.scheduler,
                                          min(self.budget.blocks_for(max_model_len), self.budget.num_blocks))
            self.take_committed_blocks()
        if kv_caches is None:
            kv_caches = allocate_kv_caches(model_config, self.budget, engine_config.kv_dtype)
        self.kv_caches = kv_caches
        self.prompt_cache = None      # attach_prompt_cache: host-RAM and disk tiers beyond the pool
        self.runner = maybe_wrap(ModelRunner(model, kv_caches, engine_config.block_size))
        self.sampler = Sampler()
        why_not = (speculation_unsupported(model_config, model)
                   if engine_config.speculative_tokens or draft is not None else "")
        if why_not:
            log.info("speculative decoding off: %s", why_not)
        self.speculator = Speculator(0 if why_not else engine_config.speculative_tokens,
                                     None if why_not else draft, engine_config.draft_max_tokens)
        self.draft = draft
        # Grammars: compiled (and validated) per request, one matcher per sequence, masks filled into
        # one preallocated (max_num_seqs, ceil(V/32)) int32 buffer each step.
        self.structured = LLGuidanceBackend(tokenizer, model_config.vocab_size, self.eos_token_ids)
        self.grammar_masks = GrammarMasks(self.structured, engine_config.max_num_seqs, model_config.vocab_size)
        self.requests: dict[str, RequestState] = {}
        self._aborts: dict[str, Termination] = {}
        self._lock = threading.Lock()         # guards _aborts; everything else is touched by the engine thread only
        self.last_step_error: Exception | None = None  # the model-runner failure of the last step, if any
        self.last_step_ran_model = False                 # the last step ran the model (breaker evidence)

    def attach_prompt_cache(self, cache) -> bool:
        """Keep evicted blocks in, and restore prefixes from, the tiers of `cache` (engine/prompt_cache).
        False (nothing attached) where the pool has no prefix cache (off, or the sliding layers' own pool)."""
        from haltwise.engine.prompt_cache.engine_link import PromptCacheLink

        if not self.allocator.enable_prefix_caching:
            return False
        self.prompt_cache = cache
        self.scheduler.restore = PromptCacheLink(cache, self.allocator, self.kv_caches).restore
        return True

    # ---- requests in -------------------------------------------------------------------------------------------
    def prepare_prompt(self, prompt_token_ids: list[int], params: SamplingParams) -> tuple[list[int], int]:
        """Validate ids and lengths (SPEC §3: no silent truncation). Returns (prompt ids, tokens truncated)."""
        if params.priority and self.config.scheduling_policy != "priority":
            raise InvalidRequest(f"priority {params.priority} needs --scheduling-policy priority (this server "
                                 "schedules first come, first served; priority must be 0)", param="priority")
        return check_prompt(prompt_token_ids, params, self.model_config.vocab_size, self.max_model_len)

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        """Raises InvalidRequest / ContextLengthExceeded / RequestTooLarge / Overloaded; nothing is kept then."""
        self.admit(self.prepare_request(request_id, prompt_token_ids, params, arrival_time))

    def prepare_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                        arrival_time: float | None = None) -> RequestState:
        """Validate and build a request's per-sequence state (stoppers, matchers, detokenizers): the costly
        per-request work, which touches no engine state, so any thread may run it (AsyncEngine runs it off
        the engine thread). Raises InvalidRequest / ContextLengthExceeded."""
        prompt, truncated = self.prepare_prompt(prompt_token_ids, params)
        arrival = arrival_time if arrival_time is not None else time.monotonic()
        timeout = params.timeout if params.timeout is not None else self.default_timeout
        grammar = self.compile_structure(params)
        states = [self.seq_builder.build(request_id, prompt, params, i, arrival, timeout) for i in range(params.n)]
        if grammar is not None:
            for state in states:
                state.matcher = grammar.new_matcher()
        return RequestState(request_id, prompt, states, truncated)

    def admit(self, request: RequestState) -> None:
        """Queue a prepared request's sequences (engine thread). Raises RequestTooLarge / Overloaded."""
        request_id = request.request_id
        if request_id in self.requests:
            raise InvalidRequest(f"Duplicate request id {request_id!r}.", param="request_id")
        added: list[Sequence] = []
        try:
            for state in request.seqs:
                self.scheduler.add(state.seq)
                added.append(state.seq)
        except AdmissionError as e:
            for seq in added:
                self.scheduler.finish(seq, Termination(Reason.CANCELLED, "admission rejected a sibling"))
            retry = getattr(e, "retry_after", None)
            if e.kind == "too_large":
                raise RequestTooLarge(str(e), param="max_tokens") from None
            raise Overloaded(str(e), retry_after=retry if retry is not None else 1.0) from None
        self.requests[request_id] = request

    def compile_structure(self, params: SamplingParams):
        """The compiled grammar of params.structured_outputs (cached), or None; raises InvalidRequest (400)."""
        if params.structured_outputs is None:
            return None
        try:
            return self.structured.compile(params.structured_outputs)
        except StructureError as e:
            raise InvalidRequest(str(e), param=e.param) from None

    def abort(self, request_id: str, termination: Termination | None = None) -> None:
        """Thread-safe; applied between steps (SPEC §2: a token in flight is delivered once or not at all).

        termination defaults to reason cancelled; the watchdog passes reason error for a hung step.
        """
        with self._lock:
            self._aborts.setdefault(request_id, termination or Termination(Reason.CANCELLED, "request aborted"))

    # ---- the step ----------------------------------------------------------------------------------------------
    def has_unfinished(self) -> bool:
        return bool(self.requests) or bool(self._aborts)

    def step(self) -> list[RequestOutput]:
        """One engine iteration. Returns an update for every request that changed."""
        self.last_step_error, self.last_step_ran_model = None, False
        self.take_committed_blocks()
        self._apply_aborts_and_deadlines()
        out = self.scheduler.schedule(self._propose if self.speculator.active else None)
        for seq in out.preempted:
            self.speculator.forget(seq.seq_id)
        if out.scheduled:
            self.last_step_ran_model = True
            self._run(out)
        return self._collect_updates()

    def take_committed_blocks(self) -> None:
        """KV blocks committed since the last call become usable (a no-op once the whole pool is)."""
        if self.pool_growth is not None and not self.pool_growth.advance():
            self.pool_growth = None

    def _propose(self, seq: Sequence, k_max: int) -> list[int]:
        state = next(s for s in self.requests[seq.request_id].seqs if s.seq is seq)
        return self.speculator.propose(state, k_max)

    def _run(self, out) -> None:
        states = {s.seq.seq_id: s for r in self.requests.values() for s in r.seqs}
        # A prompt-scoring sequence (max_tokens 0) ends when its prompt is computed: nothing is sampled.
        scored_only = [sch for sch in out.scheduled if sch.samples and sch.seq.params.max_tokens == 0]
        runs = [sch for sch in out.scheduled if sch.samples and sch.seq.params.max_tokens != 0]
        sampled = [states[sch.seq.seq_id] for sch in runs]
        started = time.perf_counter()
        try:
            rows = [BatchRow(sch.seq.token_ids, sch.seq.block_table, sch.start, sch.start + sch.num_new_tokens,
                             sch.samples and sch.seq.params.max_tokens != 0, sch.draft_token_ids,
                             self.allocator.window_table(sch.seq, sch.start, sch.start + sch.num_new_tokens
                                                         + len(sch.draft_token_ids)), sch.seq.needs_prompt_logits)
                    for sch in out.scheduled]
            logits = self.runner.execute(rows)   # 1 + k rows per run: its last token's, then each draft's
            heads = score_prompts([states[sch.seq.seq_id] for sch in out.scheduled], rows, logits)
            grammar = self._grammar_mask(sampled)
            head = logits if len(heads) == logits.shape[0] else logits[heads]
            result = self.sampler(head, [s.sampling_row() for s in sampled], grammar) if sampled else None
        except Exception as e:  # a failed step ends exactly the sequences in it (SPEC §2, system layer)
            log.exception("engine step failed")
            self.last_step_error = e
            for sch in out.scheduled:
                self._finish(states[sch.seq.seq_id], Termination(Reason.ERROR, f"engine step failed: {e}"))
            return
        self.step_cost.observe(out.num_batched_tokens, out.num_attention_pairs, time.perf_counter() - started)
        self.scheduler.after_step(out)
        for sch in scored_only:
            self._finish(states[sch.seq.seq_id], Termination(Reason.MAX_TOKENS, "max_tokens 0: the prompt was "
                                                             "scored, nothing generated"))
        for i, state in enumerate(sampled):
            if not result.finite[i]:
                self._finish(state, Termination(Reason.ERROR, "model produced NaN/Inf logits"))
                continue
            if result.no_legal_token is not None and result.no_legal_token[i]:
                self._finish(state, Termination(Reason.ERROR, f"{state.matcher.spec.describe()}: the grammar allows "
                                                "no token here (nothing can continue the structure)"))
                continue
            termination = state.on_token(result.token_ids[i], result.logprobs[i])
            if drafts := runs[i].draft_token_ids:
                more, accepted = self.speculator.accept(state, drafts, result.token_ids[i],
                                                        logits[heads[i] + 1: heads[i] + 1 + len(drafts)],
                                                        self.sampler, ended=termination is not None)
                termination = termination or more
                if termination is None:
                    self.scheduler.after_drafts(state.seq, accepted)
            self.requests[state.seq.request_id].dirty = True
            if termination is not None:
                self._finish(state, termination)

    def _grammar_mask(self, sampled: list[SeqOutputState]) -> GrammarMask | None:
        return self.grammar_masks.fill(sampled)

    def _apply_aborts_and_deadlines(self) -> None:
        with self._lock:
            aborts, self._aborts = self._aborts, {}
        now = time.monotonic()
        for request in list(self.requests.values()):
            for state in request.seqs:
                seq = state.seq
                if seq.is_finished:
                    continue
                if request.request_id in aborts:
                    self._finish(state, aborts[request.request_id])
                elif seq.deadline is not None and now >= seq.deadline:
                    timeout = seq.deadline - seq.arrival_time
                    self._finish(state, Termination(Reason.TIMEOUT, f"deadline of {timeout:g}s passed"))

    def _finish(self, state: SeqOutputState, termination: Termination) -> None:
        if state.seq.is_finished:
            return
        self.scheduler.finish(state.seq, state.finish(termination))
        self.speculator.forget(state.seq.seq_id)
        self.requests[state.seq.request_id].dirty = True

    def _collect_updates(self) -> list[RequestOutput]:
        updates = []
        for request_id, request in list(self.requests.items()):
            if request.dirty:
                updates.append(request.take_update())
            if request.finished:
                del self.requests[request_id]
        return updates

    # ---- introspection -----------------------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        return engine_stats(self)

    def describe(self) -> str:
        return describe_engine(self)
