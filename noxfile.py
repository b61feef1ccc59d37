"""Nox sessions: ``nox`` runs lint, typecheck and tests (see ``nox -l``)."""

import nox

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"


def _install(session: nox.Session, *extras: str) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after --)."""
    _install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install("ruff>=0.9")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, tests, bench and this noxfile (config in mypy.ini)."""
    _install(session, "test", "clickhouse")
    session.install("mypy>=1.15", "nox>=2025.2.9")
    session.run("mypy", "--config-file", "mypy.ini")


@nox.session(python=PYTHON)
def clickhouse(session: nox.Session) -> None:
    """The ClickHouse backend on a real ClickHouse engine (chDB, in process and over HTTP).

    The store conformance suite on both paths and the KILL QUERY tests (tests/store/clickhouse),
    then the end-to-end tests on ``coremetry serve --demo`` with the ClickHouse backend behind
    it (the HTTP stand-in on chDB; see tests/store/clickhouse/with_clickhouse.py).
    """
    _install(session, "clickhouse-test")
    session.run("pytest", "tests/store/clickhouse", *session.posargs)
    session.run(
        "python",
        "-m",
        "tests.store.clickhouse.with_clickhouse",
        "--",
        "pytest",
        "tests/observability/test_demo_e2e.py",
        "tests/observability/test_demo_entries.py",
        "tests/observability/test_output_budget.py",
        "tests/observability/test_problems.py",
        "tests/observability/test_walkthrough.py",
        "tests/observability/test_consistent_answers.py",
        *session.posargs,
    )


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """Official MCP conformance suite, 2025-11-25 and 2026-07-28, against the fixture server.

    Runs ``tests/conformance/run-conformance.sh`` (needs ``npm``: it fetches Node 22 and the
    pinned suite itself);
    arguments after ``--`` go to ``tests/conformance/run.py`` (e.g. ``--revision 2026-07-28``).
    """
    _install(session)
    session.run("python", "tests/conformance/run.py", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Run the benchmarks under bench/ (figures and ratios to an in-run baseline)."""
    _install(session)
    session.run("python", "bench/dispatch_cost.py", *session.posargs)


@nox.session(python=PYTHON)
def bench_http(session: nox.Session) -> None:
    """tools/call echo over Streamable HTTP vs a bare-ASGI floor and the mcp SDK (wrk, taskset).

    Needs ``wrk`` and ``taskset`` on PATH and two cores; arguments after ``--`` go to
    ``bench/http_echo.py`` (e.g. ``--duration 3 --connections 1,16,64 --repeat 3``).
    """
    _install(session, "test")  # the mcp SDK reference server comes with the test extra
    session.run("python", "bench/http_echo.py", *session.posargs)


@nox.session(python=PYTHON)
def node_clients(session: nox.Session) -> None:
    """Real Node.js programs from npm against the server: an OpenID Connect provider
    (``oidc-provider``) and the MCP TypeScript SDK's WebSocket client with a ticket.

    Runs ``tests/node`` (collected only here: it sets ``COREMETRY_NODE_TESTS=1``); needs
    ``node`` 20.19+ and ``npm``, which installs the pinned packages under the temporary folder
    on first use (see ``tests/node/conftest.py``).
    """
    _install(session, "test")
    session.run("pytest", "tests/node", *session.posargs, env={"COREMETRY_NODE_TESTS": "1"})


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """OAuth sign-in through the page in a real headless browser, and the MCP Inspector CLI
    connecting after OAuth (issue 18).

    Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y chromium
    chromium-driver``; .ci/run installs them): Selenium drives ``/usr/bin/chromium``, no browser
    is downloaded. Needs ``npm``: ``tests/browser/install-inspector.sh`` fetches Node 22 and the
    Inspector from the npm registry. Arguments after ``--`` go to pytest.
    """
    _install(session, "test")
    printed = session.run("bash", "tests/browser/install-inspector.sh", external=True, silent=True)
    paths = printed if isinstance(printed, str) else ""
    env = dict(line.split("=", 1) for line in paths.splitlines() if "=" in line)
    session.run(
        "pytest",
        "tests/browser/oauth_in_chromium.py",
        "tests/browser/oauth_inspector.py",
        *session.posargs,
        env=env,
    )
