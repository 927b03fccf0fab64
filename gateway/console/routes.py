"""Serves the console's static files: `/` leads to `/console/`, the page and its two assets (plain
HTML, CSS and JavaScript: nothing is built at install time). The page itself needs no login; every
API call it makes does."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

STATIC = Path(__file__).parent / "static"
_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}


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
        if name not in _ASSETS:   # a fixed list: no path from the request reaches the file system
            raise HTTPException(404, "not found")
        return FileResponse(STATIC / name, media_type=_ASSETS[name])

    return api
