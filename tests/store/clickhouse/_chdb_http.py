"""A ClickHouse HTTP interface on loopback that runs the SQL it receives on chDB.

No ClickHouse server can be installed here (Debian carries 18.16, from 2018, without the
``Map`` type the exporter's schema needs; nothing newer is on PyPI or in Debian), so the
``clickhouse-connect`` HTTP path is exercised against this stand-in: ``POST /`` with the
statement in the body (or in ``query=`` with the rows of an ``INSERT`` in the body), settings
and ``param_*`` query parameters in the URL, answered as ClickHouse answers — the result in
the format the statement names (``Native`` for the client's reads), ``X-ClickHouse-*``
headers, and errors as HTTP 500 with ``X-ClickHouse-Exception-Code`` and the ``Code: N.
DB::Exception: ...`` text. ``GET /ping`` answers ``Ok.``.

The engine is the real ClickHouse engine (chDB, in this process); what the stand-in adds is
what chDB has no place for: several clients at once (statements take turns on the one
engine), and a process list — every statement is registered by its ``query_id`` while it
runs, and ``KILL QUERY WHERE query_id = '...'`` marks it killed. Tests can *hold* statements
(``hold``: a predicate on the SQL) to stand for a long scan: a held statement waits until it
is killed (answered with ``394 QUERY_WAS_CANCELLED``) or until its ``max_execution_time`` has
passed plus ``overshoot_s`` (``159 TIMEOUT_EXCEEDED``; a real server checks its limit between
blocks, so it overshoots too). ``kills`` and ``held`` record what happened, for assertions.
A statement that fails on chDB leaves the stand-in on a fresh handle: chDB would return what
the failed statement had output ahead of the next statement's result.
"""

from __future__ import annotations

import email.parser
import email.policy
import gzip
import re
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

import clickhouse_connect
import lz4.frame
from clickhouse_connect.driver._chdbclient import ChdbClient

_FORMAT: Final = re.compile(r"\s+FORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_KILL: Final = re.compile(
    r"^\s*KILL\s+QUERY\s+WHERE\s+query_id\s*=\s*'([0-9a-f-]{36})'(?:\s+(?:ASYNC|SYNC))?\s*$",
    re.IGNORECASE,
)
_INSERT: Final = re.compile(r"^\s*INSERT\s+INTO\s", re.IGNORECASE)
_INSERT_BODY: Final = re.compile(rb"(\s*INSERT\s+INTO\s[^\n]*?\sFORMAT\s+\w+)\s*?\n", re.IGNORECASE)
_CODE: Final = re.compile(r"\bCode:\s*(\d+)")
_NAME: Final = re.compile(r"\(([A-Z][A-Z0-9_]+)\)")
_TRANSPORT: Final = frozenset(
    {
        "query",
        "database",
        "query_id",
        "session_id",
        "default_format",
        "wait_end_of_query",
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "enable_http_compression",
        "compress",
        "decompress",
        "user",
        "password",
        "quota_key",
        "client_protocol_version",
        "session_timeout",
        "session_check",
        "buffer_size",
        "role",
    }
)
_SETTING: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ServerError(Exception):
    """A statement the stand-in answers with a ClickHouse error."""

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name


@dataclass
class Running:
    """One statement in the stand-in's process list."""

    query_id: str
    sql: str
    max_execution_time: float | None
    killed: threading.Event = field(default_factory=threading.Event)


@dataclass
class ChdbHttpServer:
    """The stand-in's state: where it listens and what it saw (see the module docstring)."""

    url: str
    client: ChdbClient
    dsn: str = "chdb://memory"
    hold: Callable[[str], bool] | None = None
    overshoot_s: float = 1.0
    running: dict[str, Running] = field(default_factory=dict)
    kills: list[str] = field(default_factory=list)
    held: list[Running] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    engine: threading.Lock = field(default_factory=threading.Lock)
    """Taken around every statement on chDB: one engine in this process, and statements run
    at once from several handler threads (a cancelled read still running beside the next one)
    mixed their output — a client then failed to decode a block."""
    held_event: threading.Event = field(default_factory=threading.Event)

    def kill(self, query_id: str) -> None:
        with self.lock:
            self.kills.append(query_id)
            entry = self.running.get(query_id)
        if entry is not None:
            entry.killed.set()

    def execute(
        self,
        sql: str,
        params: dict[str, str],
        settings: dict[str, str],
        query_id: str,
        body: bytes | None,
    ) -> tuple[bytes, str]:
        """Run one statement; its output and format (blocking)."""
        kill = _KILL.match(sql)
        if kill is not None:
            self.kill(kill.group(1))
            return b"", "TabSeparated"
        limit = float(settings["max_execution_time"]) if "max_execution_time" in settings else None
        entry = Running(query_id=query_id, sql=sql, max_execution_time=limit)
        with self.lock:
            self.statements.append(sql)
            self.running[query_id] = entry
        try:
            if self.hold is not None and self.hold(sql):
                self._hold(entry)
            if entry.killed.is_set():
                raise ServerError(394, "QUERY_WAS_CANCELLED", "Query was cancelled")
            return self._run(sql, params, settings, body)
        finally:
            with self.lock:
                self.running.pop(query_id, None)

    def _hold(self, entry: Running) -> None:
        with self.lock:
            self.held.append(entry)
        self.held_event.set()
        limit = entry.max_execution_time
        wait = None if limit is None else limit + self.overshoot_s
        if not entry.killed.wait(wait if wait is not None else 60.0):
            raise ServerError(
                159,
                "TIMEOUT_EXCEEDED",
                f"Timeout exceeded: elapsed {wait} seconds, maximum: {limit}",
            )

    def _run(
        self, sql: str, params: dict[str, str], settings: dict[str, str], body: bytes | None
    ) -> tuple[bytes, str]:
        found = _FORMAT.search(sql)
        fmt = found.group(1) if found else settings.get("default_format", "TabSeparated")
        statement = sql[: found.start()] if found else sql
        clause = ", ".join(f"{k} = {_quoted(v)}" for k, v in settings.items())
        if body is not None and _INSERT.match(statement):
            with tempfile.NamedTemporaryFile(suffix=".native") as data:
                data.write(body)
                data.flush()
                statement = f"{statement} FROM INFILE '{data.name}'"
                if clause:
                    statement += f" SETTINGS {clause}"
                return self._exec(f"{statement} FORMAT {fmt}", "TabSeparated", params), fmt
        if clause and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statement = f"{statement}\nSETTINGS {clause}"
        return self._exec(statement, fmt, params), fmt

    def _exec(self, sql: str, fmt: str, params: dict[str, str]) -> bytes:
        try:
            # The stand-in's own handle on the engine, behind its lock: its statements take
            # turns (the backend's private entry point: raw SQL, text parameters, a format).
            with self.engine:
                try:
                    result = self.client._backend._run(sql, fmt, params)
                    data: bytes = result.bytes()
                except Exception:
                    # chDB keeps what a failed statement had output on its connection and
                    # returns it ahead of the next statement's result: a fresh handle (opened
                    # first: an in-memory engine is dropped with its last connection).
                    failed, self.client = self.client, _chdb_client(self.dsn)
                    failed.close()
                    raise
            return data
        except Exception as exc:
            text = str(exc)
            code = _CODE.search(text)
            names = _NAME.findall(text)
            raise ServerError(
                int(code.group(1)) if code else 1001, names[-1] if names else "STD_EXCEPTION", text
            ) from None


def _quoted(value: str) -> str:
    try:
        float(value)
    except ValueError:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return value


def _decoded(body: bytes, encoding: str | None) -> bytes:
    if not encoding:
        return body
    if encoding == "lz4":
        data: bytes = lz4.frame.decompress(body)
        return data
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "zstd":
        from backports import zstd

        out: bytes = zstd.decompress(body)
        return out
    raise ServerError(1001, "UNKNOWN_CODEC", f"unsupported Content-Encoding {encoding}")


def _form_fields(content_type: str, body: bytes) -> dict[str, str]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload.decode()
    return fields


def _handler(server: ChdbHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def do_GET(self) -> None:
            if self.path.startswith("/ping"):
                self._send(200, b"Ok.\n", {"Content-Type": "text/plain"})
            else:
                self.do_POST()

        def do_POST(self) -> None:
            raw = self._body()
            query = urllib.parse.parse_qs(
                urllib.parse.urlsplit(self.path).query, keep_blank_values=True
            )
            args = {k: v[-1] for k, v in query.items()}
            query_id = args.get("query_id") or f"{time.time_ns():x}"
            headers = {
                "X-ClickHouse-Query-Id": query_id,
                "X-ClickHouse-Timezone": "UTC",
                "X-ClickHouse-Server-Display-Name": "chdb-http-stand-in",
            }
            try:
                body = _decoded(raw, self.headers.get("Content-Encoding"))
                content_type = self.headers.get("Content-Type") or ""
                if content_type.startswith("multipart/form-data"):
                    # Large parameters come as form fields (query and param_* alike).
                    args.update(_form_fields(content_type, body))
                    body = b""
                if "query" in args:
                    sql, data = args["query"], body
                elif (insert := _INSERT_BODY.match(body)) is not None:
                    # "INSERT ... FORMAT Native\n" and the rows, in one body.
                    sql, data = insert.group(1).decode(), body[insert.end() :]
                else:
                    sql, data = body.decode(), None
                params = {k[6:]: v for k, v in args.items() if k.startswith("param_")}
                settings = {
                    k: v
                    for k, v in args.items()
                    if not k.startswith("param_") and k not in _TRANSPORT and _SETTING.fullmatch(k)
                }
                if "default_format" in args:
                    settings["default_format"] = args["default_format"]
                output, fmt = server.execute(sql, params, settings, query_id, data)
                settings.pop("default_format", None)
            except ServerError as exc:
                message = f"Code: {exc.code}. DB::Exception: {exc}. ({exc.name}) (version chdb)\n"
                self._send(
                    500,
                    message.encode(),
                    {
                        **headers,
                        "Content-Type": "text/plain; charset=UTF-8",
                        "X-ClickHouse-Exception-Code": str(exc.code),
                    },
                )
                return
            summary = '{"read_rows":"0","read_bytes":"0","written_rows":"0","written_bytes":"0"}'
            self._send(
                200,
                output,
                {
                    **headers,
                    "Content-Type": "application/octet-stream",
                    "X-ClickHouse-Format": fmt,
                    "X-ClickHouse-Summary": summary,
                },
            )

    return Handler


def _chdb_client(dsn: str) -> ChdbClient:
    client = clickhouse_connect.get_client(dsn=dsn)
    assert isinstance(client, ChdbClient)
    return client


@contextmanager
def serve_chdb_http(dsn: str = "chdb://memory") -> Iterator[ChdbHttpServer]:
    """Serve the stand-in on ``127.0.0.1`` (a free port) in a thread until the block ends."""
    state = ChdbHttpServer(url="", client=_chdb_client(dsn), dsn=dsn)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="chdb-http", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        for entry in list(state.running.values()):
            entry.killed.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
