"""Containment of failures: one broken task is logged and ends alone, never the process.

Every task the server starts goes through one of these:

- :func:`contained` — a ``with`` block around one unit of work (a connection, a request, one
  pass of a background loop): an ``Exception`` raised inside it (alone or in an exception group)
  is logged at ERROR with a short incident id and swallowed; ``trio.Cancelled``,
  ``KeyboardInterrupt`` and ``SystemExit`` always propagate (a group is split: its
  ``Exception`` members are logged, the rest re-raised).
- :func:`supervise` — runs a long-lived background task (the detector, retention, ...) and, if
  it fails, logs the failure and starts it again after ``restart_after_s`` (forever, until
  cancelled). A task that returns normally is not restarted.

The incident id (8 hex digits) is what an operator greps the log for; the transports put the
same id in the error they send, when they can still send one.

This module imports nothing of ours, so every layer may use it.
"""

import logging
import secrets
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final

import trio

log: Final = logging.getLogger("coremetry.supervision")


def new_incident() -> str:
    """A fresh incident id: 8 lowercase hex digits, for a log line and a client's error."""
    return secrets.token_hex(4)


class Contained:
    """The context manager :func:`contained` returns.

    ``id`` is the incident id once a failure was logged (``None`` while nothing failed).
    """

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self.logger = logger
        self.id: str | None = None

    def __enter__(self) -> "Contained":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if exc is None:
            return False
        if isinstance(exc, Exception):
            self._log(exc)
            return True
        if not isinstance(exc, BaseExceptionGroup):
            return False  # Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit
        failures, rest = exc.split(Exception)
        if failures is None:
            return False
        self._log(failures.exceptions[0] if len(failures.exceptions) == 1 else failures)
        if rest is not None:
            raise rest from None  # what is left (cancellation) goes on, without the failures
        return True

    def _log(self, failure: BaseException) -> None:
        self.id = new_incident()
        self.logger.error("%s failed (incident %s)", self.what, self.id, exc_info=failure)


def contained(what: str, logger: logging.Logger = log) -> Contained:
    """Log and swallow an ``Exception`` escaping the ``with`` block; let cancellation through.

    Args:
        what: names the unit of work in the log line (``"HTTP connection from ..."``).
        logger: where the ERROR line (with the traceback and the incident id) goes.

    Returns:
        A context manager; ``as`` gives the :class:`Contained`, whose ``id`` is set when a
        failure was logged.

    Raises:
        BaseException: anything that is not an ``Exception`` (``trio.Cancelled``,
            ``KeyboardInterrupt``, ``SystemExit``), unchanged; from a mixed exception group,
            the group of those members (the ``Exception`` members are logged).
    """
    return Contained(what, logger)


async def supervise(
    what: str,
    run: Callable[[], Awaitable[None]],
    *,
    restart_after_s: float = 5.0,
    logger: logging.Logger = log,
) -> None:
    """Run ``run()``; when it fails, log it and run it again after ``restart_after_s`` seconds.

    Returns when ``run()`` returns normally; runs until cancelled otherwise. Cancellation (and
    ``KeyboardInterrupt``) propagate as always.

    Args:
        what: names the task in the log line.
        run: starts the task afresh (a loop that should run for the server's lifetime).
        restart_after_s: pause before each restart, in seconds (a task that fails at once is
            not restarted in a tight loop).
        logger: where each failure is logged (ERROR, with the traceback and an incident id).
    """
    while True:
        with contained(what, logger) as incident:
            await run()
        if incident.id is None:
            return
        logger.warning(
            "%s: restarting in %g s (after incident %s)", what, restart_after_s, incident.id
        )
        await trio.sleep(restart_after_s)
