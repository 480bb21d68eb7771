"""The playground page: `/` serves ui/index.html, `/ui/*` its static files (no build step, no CDN).

Authentication: the page itself is public (it holds no secret and no data, like /docs); every API
call it makes goes to /v1/*, which the ApiKey guard protects. With `--api-key` the page asks for the
key and sends it as `Authorization: Bearer KEY` (kept in the tab's sessionStorage only).
"""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

UI_DIR = Path(__file__).with_name("ui")


def install_page(app: FastAPI) -> None:
    """Add GET / (the page) and /ui/* (its assets); none of them appear in the OpenAPI schema."""
    index = UI_DIR / "index.html"

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=UI_DIR), name="ui")
