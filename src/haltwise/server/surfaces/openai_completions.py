"""POST /v1/completions: OpenAI (legacy) completions; `prompt` may be a string, strings, token ids or
lists of token ids. Request fields: openai_protocol.py; bodies and chunks: openai_bodies.py."""
from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from haltwise.outputs import RequestOutput
from haltwise.server.state import begin
from haltwise.server.surfaces.openai_bodies import Chunker, completion_body
from haltwise.server.surfaces.openai_protocol import CompletionRequest
from haltwise.server.surfaces.openai_stream import generate

router = APIRouter()


def echo_texts(prompts: list[str | list[int]], run_outs: list[RequestOutput], tokenizer: Any) -> list[str]:
    """The prompt as echoed: the original string, or the decoded (possibly truncated) prompt ids."""
    texts = []
    for p, out in zip(prompts, run_outs):
        if isinstance(p, str) and not out.num_truncated_prompt_tokens:
            texts.append(p)
        else:
            texts.append(tokenizer.decode(out.prompt_token_ids, skip_special_tokens=False))
    return texts


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    """OpenAI completions; `prompt` may be a string, strings, token ids or lists of token ids."""
    st = begin(request, body)
    params, tok = body.to_sampling_params(), st.engine.tokenizer
    raw = body.prompts()
    # Tokenizing up to max_prompts large prompts is CPU work: off the event loop (a worker thread).
    prompts = await run_in_threadpool(lambda: [tok.encode(p) if isinstance(p, str) else p for p in raw])
    texts = [p if isinstance(p, str) else None for p in raw]
    rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), st.served_model_name

    def build(outs: list[RequestOutput]) -> dict[str, Any]:
        echo = echo_texts(raw, outs, tok) if body.echo else None
        return completion_body(rid, created, model, outs, body.n, echo, tok, body.prompt_logprobs is not None)

    def echo(p: int, out: RequestOutput) -> str:
        return echo_texts([raw[p]], [out], tok)[0]

    chunker = Chunker(False, rid, created, model, body.n, tok, body.include_usage, echo if body.echo else None)
    return await generate(request, st, rid, prompts, texts, params, body.stream, build, chunker)
