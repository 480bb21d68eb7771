"""Protocol surfaces: one module per surface, each a router, over the protocol-neutral core
(server/state.py, server/generation.py, server/chat_core.py), which imports no surface.

    openai_completions, openai_chat   OpenAI (request fields openai_protocol.py, bodies openai_bodies.py,
                                      shared SSE and generation path openai_stream.py)
    anthropic_messages                Anthropic Messages (anthropic_protocol.py, anthropic_errors.py)
    openai_responses                  OpenAI Responses (openai_responses_protocol.py)

A new surface is a new module here and one entry in SURFACES.
"""
from __future__ import annotations

from haltwise.server.surfaces.anthropic_messages import router as anthropic_messages
from haltwise.server.surfaces.openai_chat import router as openai_chat
from haltwise.server.surfaces.openai_completions import router as openai_completions
from haltwise.server.surfaces.openai_responses import router as openai_responses

SURFACES = (openai_completions, openai_chat, anthropic_messages, openai_responses)
