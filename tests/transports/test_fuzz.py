"""The JSON-RPC fuzzer, a seeded slice: every transport, a few hundred bodies each.

Bodies and headers from :mod:`_fuzz_support` (Hypothesis strategies, derandomized by a fixed
seed, so a failure reproduces), sent to a ``coremetry serve --fixture`` process (authentication
on) over Streamable HTTP in both eras, legacy HTTP+SSE and WebSocket, and to a ``coremetry stdio
--fixture`` process. Every answer is judged by the oracle (no 5xx, no internal error, the right
JSON-RPC error code or HTTP refusal, no answer to a notification), and after every body a normal
``tools/call echo`` must still work on the same transport; neither process may exit. The full
run, ≥ 100,000 bodies, is ``bench/fuzz.py``.
"""

from pathlib import Path
from typing import Final

import httpx
import trio
from _fuzz_support import (
    HANDSHAKE,
    STATELESS,
    Case,
    Driver,
    HeaderEdit,
    HttpDriver,
    SseDriver,
    Tally,
    WsDriver,
    expected_refusal,
    generate_cases,
    run_cases,
    start_http_server,
    start_stdio,
    tally_report,
)

EXAMPLES: Final = 150
"""Bodies per transport in CI (the bench sends far more)."""

SEED: Final = 13
LIMIT_S: Final = 600.0
"""Only against a hang: the slice takes well under a minute on a quiet machine."""


async def test_fuzzed_bodies_and_headers_on_every_transport(tmp_path: Path) -> None:
    tallies: dict[str, Tally] = {}
    with trio.fail_after(LIMIT_S):
        async with (
            start_http_server(tmp_path / "serve") as server,
            httpx.AsyncClient(timeout=60) as client,
            trio.open_nursery() as nursery,
        ):
            sse = SseDriver(server, client)
            await sse.open(nursery)
            ws = WsDriver(server)
            await ws.open(nursery)
            drivers: list[Driver] = [
                HttpDriver(server, client, HANDSHAKE),
                HttpDriver(server, client, STATELESS),
                sse,
                ws,
            ]
            # The same bodies on every transport (generating them is the slow part).
            examples = generate_cases(EXAMPLES, SEED)
            for driver in drivers:
                tally = tallies[driver.name] = Tally()
                await run_cases(driver, examples, tally, exited=lambda: server.exited)
            async with start_stdio(tmp_path / "stdio", nursery) as stdio:
                tally = tallies["stdio"] = Tally()
                await run_cases(stdio, examples, tally, exited=lambda: stdio.exited)
            for driver in drivers:
                await driver.aclose()
            assert not server.exited
            nursery.cancel_scope.cancel()
    failures = [f for t in tallies.values() for f in t.failures]
    assert not failures, "\n".join(failures[:20]) + "\n" + tally_report(tallies)
    assert all(t.sent == EXAMPLES for t in tallies.values()), tally_report(tallies)
    assert sum(t.server_errors for t in tallies.values()) == 0


def test_the_oracle_reads_repeated_accept_lines_as_one_list() -> None:
    # Found by bench/fuzz.py --seed 4: "Accept: text/html" then an added "Accept:
    # application/json" is one list naming JSON (RFC 9110 §5.3), served, not 406.
    refusing = HeaderEdit("accept", "text/html", "set", 406)
    acceptable = HeaderEdit("accept", "application/json", "add", None)
    assert expected_refusal(Case(b"{}", (refusing, acceptable)), []) is None
    assert expected_refusal(Case(b"{}", (refusing,)), []) == 406
    # An Accept set after the added line replaces both: refused again.
    assert expected_refusal(Case(b"{}", (acceptable, refusing)), []) == 406
