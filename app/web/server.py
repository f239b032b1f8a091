"""The aiohttp server of ``synth-tui serve`` (docs/browser.md): one page, textual-serve's
static files (its xterm.js client) and one websocket a tab, each behind the token.

Every request must carry the token: ``?token=`` in the URL (the page's answer then sets it as
a cookie, HttpOnly and SameSite=Strict, which the page's own requests carry), else that cookie.
Anything else is a 403 before any route is looked at. No request body is read; lines, headers
and websocket messages have limits, and a message the page would never send is ignored.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

import textual_serve
from aiohttp import WSMsgType, web
from textual_serve.download_manager import DownloadManager

from app.web.tab import TabSession

log = logging.getLogger("synth-tui.serve")


class _OneLine(logging.Filter):
    """aiohttp logs a request it cannot parse with a traceback: one line instead (the bytes a
    hostile client sent are not echoed either)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg, record.args = "refused a malformed request: %s", (type(record.exc_info[1]).__name__,)
            record.exc_info = record.exc_text = None
        return True


http_log = logging.getLogger("synth-tui.serve.http")
http_log.addFilter(_OneLine())

PAGE = Path(__file__).with_name("page.html")
STATIC = Path(textual_serve.__file__).with_name("static")  # textual.js (xterm.js), its CSS and fonts
MAX_SESSIONS = 8  # tabs at once: each is a Python process running the app
MAX_MESSAGE = 64 * 1024  # a websocket message (a paste is the largest the page sends)
MAX_CELLS = 1000  # a terminal's width or height
MAX_LINE = 8190  # request line and each header (aiohttp's defaults, set here on purpose)
HEARTBEAT = 15.0  # a tab that vanished without closing its socket is noticed within this
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the token is in the URL
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
REFUSED = ("403: Forbidden. Open the URL that `synth-tui serve` printed: it carries the token.\n")


# The page's note for a session that ended: how to serve the job's dashboard again.
ATTACH_AGAIN = '<code id="attach-again">synth-tui serve attach &lt;job id&gt;</code>'


def render_page(command: Sequence[str]) -> bytes:
    """The page, its ended note naming the command that serves the job again: for
    ``serve attach JOB ...`` that very command, the job's id in it; other commands' tabs learn
    their job's id only inside the app (its quit dialog says it), so the note keeps a placeholder."""
    page = PAGE.read_text("utf-8")
    if ATTACH_AGAIN not in page:
        raise AssertionError("page.html lost its attach-again note")
    if command[:1] == ["attach"]:
        again = html.escape(shlex.join(["synth-tui", "serve", *command]), quote=False)
        page = page.replace(ATTACH_AGAIN, f'<code id="attach-again">{again}</code>')
    return page.encode("utf-8")


def same_secret(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


class BrowserServer:
    """Serves ``command`` (a synth-tui command line: ``[]``, ``["demo"]``, ``["attach", ID]``…)
    to every tab that holds ``token``."""

    def __init__(self, command: Sequence[str], token: str, *, cookie_name: str = "synth_tui_token") -> None:
        self.command = list(command)
        self.token = token
        self.cookie_name = cookie_name
        self.sessions: set[TabSession] = set()
        self.downloads = DownloadManager()
        self.page = render_page(self.command)

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.require_token, self.no_server_errors], client_max_size=MAX_MESSAGE)
        app.add_routes([
            web.get("/", self.handle_page),
            web.get("/ws", self.handle_websocket),
            web.static("/static", STATIC, show_index=False, follow_symlinks=False),
        ])
        app.on_shutdown.append(self.close_sessions)
        return app

    def runner(self) -> web.AppRunner:
        # access_log=None: the access log would print every URL, token included.
        return web.AppRunner(self.make_app(), access_log=None, handle_signals=False, logger=http_log,
                             max_line_size=MAX_LINE, max_field_size=MAX_LINE)

    @web.middleware
    async def require_token(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.query.getall("token", [])
        if given:  # a wrong token in the URL is refused, cookie or not; so is a second one
            allowed = len(given) == 1 and same_secret(given[0], self.token)
        else:
            allowed = same_secret(request.cookies.get(self.cookie_name, ""), self.token)
        if not allowed:
            return web.Response(status=403, text=REFUSED, headers=PAGE_HEADERS)
        response: web.StreamResponse = await handler(request)
        if given and not response.prepared:
            response.set_cookie(self.cookie_name, self.token, path="/", httponly=True, samesite="Strict")
        return response

    @web.middleware
    async def no_server_errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """A request our routes cannot serve is a 4xx with one log line, never a 500 with a traceback."""
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except web.HTTPException:
            raise
        except (ValueError, UnicodeError, OSError) as error:
            log.warning("refused %s: %s", request.method, type(error).__name__)
            return web.Response(status=400, text="400: Bad request.\n")

    async def handle_page(self, request: web.Request) -> web.Response:
        return web.Response(body=self.page, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS)

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not _same_origin(request):
            return web.Response(status=403, text="403: Forbidden: the page of another site.\n")
        if len(self.sessions) >= MAX_SESSIONS:
            return web.Response(status=503, text=f"503: {MAX_SESSIONS} tabs are open; close one first.\n")
        width = _cells(request.query.get("width"), 80)
        height = _cells(request.query.get("height"), 24)
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT, max_msg_size=MAX_MESSAGE)
        await websocket.prepare(request)
        session = TabSession(self.command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                             close=websocket.close, download_manager=self.downloads)
        self.sessions.add(session)
        try:
            await session.start(width, height)
            log.info("tab opened: process %s", session.pid)
            async for message in websocket:
                if message.type == WSMsgType.TEXT:
                    await self._from_page(session, websocket, message.data)
        except (ConnectionError, OSError) as error:
            log.warning("tab ended: %s", type(error).__name__)
        finally:
            await asyncio.shield(self._end(session, websocket))
        return websocket

    async def _end(self, session: TabSession, websocket: web.WebSocketResponse) -> None:
        try:
            await session.close()
            await websocket.close()
        finally:
            self.sessions.discard(session)
            log.info("tab closed: process %s ended (%s)", session.pid, session.ended_by)

    async def _from_page(self, session: TabSession, websocket: web.WebSocketResponse, text: str) -> None:
        """What textual-serve's page sends; anything else is ignored."""
        envelope = _envelope(text)
        if envelope is None:
            return
        kind, data = envelope
        if kind == "stdin" and isinstance(data, str):
            await session.send_bytes(data.encode("utf-8", "replace"))
        elif kind == "resize" and isinstance(data, dict):
            width, height = data.get("width"), data.get("height")
            if _is_cells(width) and _is_cells(height):
                await session.set_terminal_size(width, height)
        elif kind == "ping" and isinstance(data, str):
            await websocket.send_json(["pong", data])
        elif kind == "blur":
            await session.blur()
        elif kind == "focus":
            await session.focus()

    async def close_sessions(self, app: web.Application | None = None) -> None:
        await asyncio.gather(*(session.close() for session in list(self.sessions)), return_exceptions=True)


def _envelope(text: str) -> tuple[str, object] | None:
    try:
        envelope = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
        return None
    return envelope[0], envelope[1] if len(envelope) > 1 else None


def _is_cells(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CELLS


def _cells(text: str | None, default: int) -> int:
    try:
        value = int(text or "")
    except ValueError:
        return default
    return value if 1 <= value <= MAX_CELLS else default


def _same_origin(request: web.Request) -> bool:
    """A websocket opened by a page of another site carries its Origin: refused (the cookie is
    SameSite=Strict already; this also covers a browser that would send it)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser: the token was checked
    scheme, _, host = origin.partition("://")
    return scheme in ("http", "https") and host == request.host
