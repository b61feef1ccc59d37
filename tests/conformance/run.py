"""Run the official MCP conformance suite against ``coremetry conformance-fixture``.

Usage (``nox -s conformance`` runs it in the session's virtualenv)::

    python tests/conformance/run.py [--revision REV ...] [--script PATH] [--results DIR]

Starts the fixture on a free loopback port (``--port 0``), reads the bound address from its
``listening on http://HOST:PORT`` line on stderr, runs ``tests/conformance/run-conformance.sh
<url>/api/mcp --requirements REV`` once per revision (default: 2025-11-25 and 2026-07-28), then
stops the server (SIGINT, then SIGKILL after 10 s). Exits 0 only when the server came up and
every run passed: the suite's own exit status (every scored scenario passes) *and* no check of
any scenario, scored or not (extensions, pending ones), has status ``FAILURE`` in the results.

The runner script is this folder's ``run-conformance.sh`` (with ``summarize_results.py``, which
prints a summary of a results folder); it needs ``npm`` and installs Node 22 (when the ``node``
on the PATH is older) and the pinned suite ``@modelcontextprotocol/conformance`` under ``/tmp``
on first use. Results go to
``results/conformance/<revision>/`` (one ``checks.json`` per scenario, plus ``run.log``).
"""

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

REPO: Final = Path(__file__).resolve().parents[2]
DEFAULT_SCRIPT: Final = Path(__file__).resolve().parent / "run-conformance.sh"
DEFAULT_RESULTS: Final = REPO / "results" / "conformance"
REVISIONS: Final = ("2025-11-25", "2026-07-28")
ENDPOINT: Final = "/api/mcp"

STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
LISTENING: Final = re.compile(r"listening on (http://\S+)")


def _fixture_command() -> list[str]:
    """The installed ``coremetry`` command beside this interpreter, else ``python -m``."""
    script = Path(sys.executable).parent / "coremetry"
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "coremetry"]
    return [*prefix, "conformance-fixture", "--port", "0"]


def _pump(stream: IO[bytes], found: "queue.Queue[str]") -> None:
    """Copy the server's stderr to ours; report the first ``listening on`` URL ("" at EOF)."""
    announced = False
    for raw in stream:
        line = raw.decode("utf-8", errors="replace")
        sys.stderr.write(f"[fixture] {line}")
        match = LISTENING.search(line)
        if match is not None and not announced:
            announced = True
            found.put(match.group(1))
    if not announced:
        found.put("")


def _stop(server: "subprocess.Popen[bytes]") -> None:
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _run_suite(script: Path, url: str, revision: str, results: Path) -> int:
    out = results / revision
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = ["bash", str(script), url, "--requirements", revision]
    print(f"conformance: {' '.join(command)} -> {out}", file=sys.stderr, flush=True)
    env = {**os.environ, "OUT_DIR": str(out)}
    return subprocess.run(command, env=env, check=False).returncode


def failed_checks(results: Path) -> list[str]:
    """Every check with status ``FAILURE`` in a results folder, as ``scenario: id: message``.

    Scored or not: the suite's exit status only counts scored scenarios, so the not-scored
    ones (the tasks extension, pending SEPs) would otherwise fail silently.
    """
    failed: list[str] = []
    for checks_file in sorted(results.glob("*/checks.json")):
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        for check in checks if isinstance(checks, list) else []:
            if isinstance(check, dict) and check.get("status") == "FAILURE":
                message = str(check.get("errorMessage") or "")[:200]
                failed.append(f"{checks_file.parent.name}: {check.get('id')}: {message}")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    """Start the fixture, run the suite per revision, stop the fixture; 0 if all passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--revision",
        action="append",
        choices=REVISIONS,
        help="a revision to run (repeatable; default: all of them)",
    )
    parser.add_argument("--script", type=Path, default=DEFAULT_SCRIPT, help="run-conformance.sh")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results folder")
    args = parser.parse_args(argv)
    script: Path = args.script
    results: Path = args.results
    revisions: list[str] = args.revision or list(REVISIONS)
    if not script.is_file():
        print(f"conformance: runner script not found: {script}", file=sys.stderr)
        return 2

    server = subprocess.Popen(
        _fixture_command(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert server.stderr is not None
    found: queue.Queue[str] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(server.stderr, found), daemon=True)
    pump.start()
    outcomes: dict[str, int] = {}
    try:
        try:
            base = found.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            base = ""
        if not base:
            print("conformance: the fixture server did not start", file=sys.stderr)
            return 1
        for revision in revisions:
            code = _run_suite(script, base + ENDPOINT, revision, results)
            failed = failed_checks(results / revision)
            for line in failed:
                print(f"conformance {revision}: FAILED CHECK {line}", file=sys.stderr)
            outcomes[revision] = code if code != 0 or not failed else 1
    finally:
        _stop(server)
        pump.join(timeout=STOP_TIMEOUT_S)
    for revision, code in outcomes.items():
        verdict = "passed" if code == 0 else f"FAILED (exit status {code})"
        print(f"conformance {revision}: {verdict}", file=sys.stderr)
    return 0 if all(code == 0 for code in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
