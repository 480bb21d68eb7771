"""POST /v1/chat/completions: OpenAI chat completions; the messages go through the model's chat template.

n choices, logprobs and the OpenAI chunk shape make this surface drive a Generation directly (with the
same tools path, chat_tools.prepare_chat, and the same template path, answer_prompt, as the chat core)."""
from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from haltwise.server.chat_prompt import answer_prompt
from haltwise.server.chat_tools import prepare_chat
from haltwise.server.state import begin
from haltwise.server.surfaces.openai_bodies import Chunker, chat_body
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest
from haltwise.server.surfaces.openai_stream import generate

router = APIRouter()


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI chat completions; the messages go through the model's chat template."""
    served = await begin(request, body)
    params, tok = body.to_sampling_params(), served.tokenizer
    plan, params, messages, template_kwargs = prepare_chat(  # chat_tools.py
        body.tools, body.tool_choice, body.parallel_tool_calls, body.template_messages(), params, tok,
        served.st.tool_call_parser)
    tools = plan.constraint if plan is not None else None
    text, prompt = await run_in_threadpool(answer_prompt, served, messages, params, tools is not None,  # off the loop
                                           **{**body.template_kwargs(), **template_kwargs})
    rid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), served.name
    chunker = Chunker(True, rid, created, model, body.n, tok, body.include_usage, tool_calls=tools)
    return await generate(request, served, rid, [prompt], [text], params, body.stream,
                          lambda outs: chat_body(rid, created, model, outs[0], tok, tools), chunker)
