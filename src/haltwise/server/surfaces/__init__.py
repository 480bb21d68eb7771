"""Protocol surfaces over the chat core (server/chat_core.py): one module per surface, each a router.

A new surface is a new module here and one entry in SURFACES, not branches in server/api.py.
"""
from __future__ import annotations

from haltwise.server.surfaces.anthropic_messages import router as anthropic_messages
from haltwise.server.surfaces.openai_responses import router as openai_responses

SURFACES = (anthropic_messages, openai_responses)
