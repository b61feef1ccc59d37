"""Sign in through the OAuth page in a real headless browser (issue 18 acceptance).

Debian's ``chromium`` and ``chromedriver`` (``apt-get install chromium chromium-driver``), driven
by Selenium from PyPI; no browser is downloaded. Run by ``nox -s browser`` (the file name keeps
it out of the default test run, which has no browser): the ``mcp`` SDK's OAuth client provider
meets a 401 from a live server, discovers it, registers, and hands the authorization URL to the
browser; the browser shows the sign-in page, a user name and password are typed and *Allow* is
clicked; the server redirects the browser to the client's loopback callback (a real listener,
as a native client has), and the SDK exchanges the code and calls a tool.
"""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlsplit

import httpx2
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from mcp.types import TextContent
from pydantic import AnyUrl
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait
from test_auth_e2e import PASSWORD, live_server
from test_oauth_e2e import MemoryStorage

LIMIT_S: Final = 120.0
"""Hang guard (a cold browser start is slow on a loaded machine; never a timed assertion)."""

CHROMIUM: Final = "/usr/bin/chromium"
CHROMEDRIVER: Final = "/usr/bin/chromedriver"
FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


@contextmanager
def callback_listener() -> Iterator[tuple[str, dict[str, str]]]:
    """A loopback listener for the redirect back; yields its URL and what it received."""
    received: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.update(parse_qsl(urlsplit(self.path).query))
            body = b"<!doctype html><title>Signed in</title><p id=done>You can close this window."
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/callback", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """Headless Debian chromium with a fresh profile."""
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


async def test_signing_in_through_the_page_in_chromium(tmp_path: Path) -> None:
    with (
        trio.fail_after(LIMIT_S),
        callback_listener() as (callback, received),
        chromium(tmp_path / "profile") as driver,
    ):
        seen: dict[str, str] = {}

        def sign_in(url: str) -> None:
            driver.get(url)
            seen["title"] = driver.title
            seen["text"] = driver.find_element(By.TAG_NAME, "body").text
            seen["scripts"] = str(len(driver.find_elements(By.TAG_NAME, "script")))
            driver.find_element(By.ID, "username").send_keys("dora")
            driver.find_element(By.ID, "password").send_keys(PASSWORD)
            driver.find_element(By.ID, "allow").click()
            WebDriverWait(driver, LIMIT_S).until(
                lambda d: (
                    d.current_url.startswith(callback) and bool(d.find_elements(By.ID, "done"))
                )
            )

        async def redirect(url: str) -> None:
            await trio.to_thread.run_sync(sign_in, url)

        async def come_back() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=received["code"], state=received.get("state"))

        async with live_server(tmp_path, users=[("dora", "viewer")]) as live:
            storage = MemoryStorage()
            provider = OAuthClientProvider(
                server_url=live.base + "/api/mcp",
                client_metadata=OAuthClientMetadata(
                    client_name="Chromium e2e",
                    redirect_uris=[AnyUrl(callback)],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"],
                ),
                storage=storage,
                redirect_handler=redirect,
                callback_handler=come_back,
            )
            async with httpx2.AsyncClient(auth=provider, timeout=LIMIT_S) as http:
                transport = streamable_http_client(live.base + "/api/mcp", http_client=http)
                async with Client(transport) as client:
                    echoed = await client.call_tool("echo", {"text": "from chromium"})
    assert seen["title"] == "Sign in to Coremetry"
    # The client asked for every scope; the page says so, and that the grant is capped at the
    # user's own role (dora is a viewer: the token says mcp:read).
    assert "Chromium e2e asks to administer this Coremetry server (admin)" in seen["text"]
    assert "never more than your own role" in seen["text"]
    assert seen["scripts"] == "0"
    assert [c.text for c in echoed.content if isinstance(c, TextContent)] == ["from chromium"]
    assert storage.tokens is not None
    assert storage.tokens.scope == "mcp:read"
