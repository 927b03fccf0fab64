"""Serves the console's static files under /console (no build step: plain HTML, CSS and JavaScript)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

STATIC = Path(__file__).parent / "static"


def router() -> APIRouter:
    api = APIRouter(include_in_schema=False)

    @api.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    @api.get("/console/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @api.get("/console/{name}")
    async def asset(name: str) -> FileResponse:
        path = STATIC / name
        if name not in _ASSETS:
            from fastapi import HTTPException
            raise HTTPException(404, "not found")
        return FileResponse(path, media_type=_ASSETS[name])

    return api


_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
