"""`ptxbench-tui --serve` answers only its own page: the page needs the start's token, and the
WebSocket that drives the explorer needs the token and the page's own Origin. The server is real
(textual-serve's aiohttp application on a socket); the clients are aiohttp's, sending the headers a
browser would, or another site's page would.
"""

from __future__ import annotations

import asyncio
import gc
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("textual_serve")
import aiohttp
from aiohttp.test_utils import TestServer

from ptxbench.tui.app import make_server

pytestmark = pytest.mark.timeout(120)

TOKEN = "k3Y-test-token_0123456789abcdefghijklmnopq"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def served():
    """The guarded server on 127.0.0.1 at a free port; the app it starts for a WebSocket exits at once."""
    port = _free_port()
    server = make_server(shlex.join([sys.executable, "-c", "pass"]), "127.0.0.1", port, TOKEN)
    site = TestServer(await server._make_app(), host="127.0.0.1", port=port)
    await site.start_server()
    async with aiohttp.ClientSession() as client:
        yield client, f"127.0.0.1:{port}", port
    await site.close()
    # textual-serve never waits for the app processes it starts: let them go while the loop still runs.
    await asyncio.sleep(0.2)
    gc.collect()


async def _handshake(client: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    """101 when the WebSocket is accepted, else the HTTP status that refused it."""
    try:
        async with client.ws_connect(url, headers=headers) as ws:
            assert not ws.closed
            await ws.close()
            return 101
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status


async def test_the_page_needs_the_token(served) -> None:
    client, here, port = served
    for query in ("", "?token=", "?token=wrong", f"?token={TOKEN[:-1]}", f"?token={TOKEN}x"):
        async with client.get(f"http://{here}/{query}") as r:
            assert r.status == 403, query
    async with client.get(f"http://{here}/?token={TOKEN}") as r:
        page = await r.text()
        assert r.status == 200 and r.headers["Referrer-Policy"] == "no-referrer"
    # The page's socket is on its own origin, with the token in its path.
    assert f'data-session-websocket-url="ws://{here}/ws/{TOKEN}"' in page
    # A name that only resolves here (DNS rebinding) is not this server.
    async with client.get(f"http://{here}/?token={TOKEN}", headers={"Host": f"attacker.example:{port}"}) as r:
        assert r.status == 403


async def test_a_websocket_from_another_origin_or_without_the_token_is_refused(served) -> None:
    client, here, port = served
    own = f"http://{here}"
    refused = [
        (f"/ws/{TOKEN}", {"Origin": "https://attacker.example"}),        # another site's page
        (f"/ws/{TOKEN}", {"Origin": f"http://attacker.example:{port}"}),  # same port, other name
        (f"/ws/{TOKEN}", {"Origin": f"https://{here}"}),                  # other scheme
        (f"/ws/{TOKEN}", {"Origin": f"http://127.0.0.1:{port + 1}"}),     # other port
        (f"/ws/{TOKEN}", {"Origin": f"http://localhost:{port}"}),         # other origin than the page's host
        (f"/ws/{TOKEN}", {"Origin": "null"}),                             # a sandboxed frame, a file
        (f"/ws/{TOKEN}", {}),                                             # no Origin at all
        ("/ws", {"Origin": own}),                                         # textual-serve's own route
        ("/ws/wrong", {"Origin": own}),
        (f"/ws/{TOKEN[:-1]}", {"Origin": own}),
        (f"/ws/{TOKEN}", {"Origin": f"http://attacker.example:{port}", "Host": f"attacker.example:{port}"}),
    ]
    for path, headers in refused:
        assert await _handshake(client, f"ws://{here}{path}?width=80&height=24", headers) == 403, (path, headers)
    # The page's own socket: the token and its own Origin.
    assert await _handshake(client, f"ws://{here}/ws/{TOKEN}?width=80&height=24", {"Origin": own}) == 101
    # Reached as localhost, the page's socket is on localhost, and that is its origin.
    local = f"localhost:{port}"
    assert await _handshake(client, f"ws://{here}/ws/{TOKEN}", {"Origin": f"http://{local}", "Host": local}) == 101


def test_each_start_has_its_own_token() -> None:
    a = make_server("true", "127.0.0.1", 8000)
    b = make_server("true", "127.0.0.1", 8000)
    assert a.token != b.token and len(a.token) >= 40
    assert a.url == f"http://127.0.0.1:8000/?token={a.token}"
    assert make_server("true", "::1", 8000).url.startswith("http://[::1]:8000/?token=")


def test_the_served_explorer_prints_its_address_once_and_guards_it(tmp_path: Path) -> None:
    """Started as a person starts it: the printed address opens the page; without its token, nothing."""
    from ptxbench.db.seed import ensure_default_store

    store = tmp_path / "store.sqlite"
    ensure_default_store(store).conn.close()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ptxbench.tui.app", "--db", str(store), "--serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the server ended before printing its address"
            if "?token=" in line:
                url = line.split()[-1]
        assert url is not None and url.startswith(f"http://127.0.0.1:{port}/?token=")
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "/ws/" + url.split("?token=")[1] in page
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 403
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        local = [line.split()[3] for line in listening.splitlines() if line.strip()]
        assert local and all(addr.startswith("127.0.0.1:") for addr in local)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
