"""`synth-tui serve` to clients that are not its page: the token on every route, a cross-site
websocket, hostile paths, lines and messages (docs/browser.md#what-is-refused)."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp

from support.pilot_waits import poll_until

UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


def status(base: str, path: str, headers: dict[str, str] | None = None) -> int:
    async def get() -> int:
        async with aiohttp.ClientSession() as client, client.get(base + path, headers=headers,
                                                                   allow_redirects=False) as response:
            return response.status

    return asyncio.run(get())


def test_every_route_refuses_a_request_without_the_right_token(serve):
    served = serve()
    wrong = f"not-{served.token}"
    for path in ("/", "/static/js/textual.js", "/static/css/xterm.css", "/nope", "/static/../../etc/passwd"):
        assert status(served.base, path) == 403, path
        assert status(served.base, f"{path}?token={wrong}") == 403, path
        assert status(served.base, path, {"Cookie": f"synth_tui_token_{served.base.rsplit(':', 1)[1]}={wrong}"}) == 403
    assert status(served.base, "/ws", UPGRADE) == 403
    assert status(served.base, f"/ws?token={wrong}", UPGRADE) == 403
    assert status(served.base, f"/?token={served.token}") == 200
    assert status(served.base, f"/static/js/textual.js?token={served.token}") == 200
    assert not served.children()


def test_hostile_requests_get_a_4xx_and_the_server_keeps_answering(serve):
    served = serve()
    token = f"token={served.token}"
    for path in (f"/static/%2e%2e/%2e%2e/etc/passwd?{token}", f"/static/?{token}", f"/%00?{token}",
                 f"/static/js/nothing.js?{token}", f"/?{token}&x={'a' * 100_000}", f"/?{token}&token=x",
                 f"/ws?{token}"):
        code = status(served.base, path)
        assert 400 <= code < 500, (path[:60], code)
    assert status(served.base, f"/?{token}", {"X-Big": "b" * 100_000}) in (400, 431)
    host, port = served.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"GARBAGE \x00\xff /\r\n\r\n")
        assert raw.recv(100).split(b"\r\n")[0].endswith(b" 400 Bad Request")
    assert status(served.base, f"/?{token}") == 200
    assert not served.children()
    assert "Traceback" not in served.output()


def test_a_websocket_from_another_site_is_refused(serve):
    served = serve()
    headers = {**UPGRADE, "Origin": "http://evil.example"}
    assert status(served.base, f"/ws?token={served.token}", headers) == 403
    assert not served.children()


def test_the_tab_ignores_what_the_page_never_sends_and_an_oversized_message_ends_it(serve):
    served = serve()

    async def talk() -> int:
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(f"{served.base}/ws?token={served.token}&width=99999&height=-1") as ws:
                pid = poll_until(served.children, what="the tab's process", timeout=30)[0]
                for junk in ("not json", "[" * 60_000, "{}", "[]", "[1]", '["stdin", 5]', '["resize", {"width": true}]',
                             '["resize", {"width": 10**9, "height": 2}]', '["nonsense", "x"]', '["stdin", "\\ud800"]'):
                    await ws.send_str(junk)
                await ws.send_bytes(b"\x00binary")
                await ws.send_str(json.dumps(["ping", "still here"]))
                drawn, pong = b"", False
                async with asyncio.timeout(60):  # the pong and the picker's title: the junk ended nothing
                    while not (pong and b"Choose" in drawn):
                        message = await ws.receive()
                        assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
                        if message.type == aiohttp.WSMsgType.BINARY:
                            drawn += message.data
                        else:
                            pong = pong or json.loads(message.data) == ["pong", "still here"]
                await ws.send_str(json.dumps(["stdin", "x" * 200_000]))  # over the 64 KiB limit
                while (message := await asyncio.wait_for(ws.receive(), 30)).type not in (
                        aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    pass
                assert ws.close_code == 1009
                return pid

    pid = asyncio.run(talk())
    served.wait_gone(pid)
    assert "Traceback" not in served.output()


def test_serving_beyond_loopback_warns(serve, tmp_path):
    served = serve(host="0.0.0.0")
    assert "Warning: listening on 0.0.0.0" in (tmp_path / "serve-0.stderr").read_text()
    port = served.base.rsplit(":", 1)[1]
    assert status(f"http://127.0.0.1:{port}", "/") == 403


def page_text(served) -> str:
    async def get() -> str:
        async with aiohttp.ClientSession() as client, client.get(f"{served.base}/?token={served.token}") as response:
            assert response.status == 200
            return await response.text()

    return asyncio.run(get())


def test_the_ended_note_of_serve_attach_names_the_job_and_how_it_was_served(serve, tmp_path):
    """`synth-tui serve attach JOB`: the note shown when the tab's session ends gives the command
    that serves this job again, with its id, not a JOB_ID placeholder."""
    env_file = tmp_path / "attach.env"
    served = serve("attach", "job_web_7", "--backend", "http://127.0.0.1:9", "--env-file", str(env_file))
    page = page_text(served)
    assert "JOB_ID" not in page
    assert (f'<code id="attach-again">synth-tui serve attach job_web_7 --backend http://127.0.0.1:9 --env-file '
            f"{env_file}</code>") in page
    assert not served.children()


def test_the_ended_note_of_another_command_says_the_id_is_the_jobs(serve):
    page = page_text(serve("jobs"))
    assert "JOB_ID" not in page and '<code id="attach-again">synth-tui serve attach &lt;job id&gt;</code>' in page


def test_the_ended_note_escapes_what_the_command_line_holds():
    from app.web.server import BrowserServer

    page = BrowserServer(["attach", "job<b>&"], "token").page.decode()
    assert "synth-tui serve attach 'job&lt;b&gt;&amp;'</code>" in page and "job<b>" not in page
