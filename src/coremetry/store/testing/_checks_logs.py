"""Checks of search_logs: the filters, paging, and the full-text syntax."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from coremetry.store.interface import MAX_LIMIT, LogQuery, TimeRange
from coremetry.store.model import LogRecord, TelemetryBatch

from ._dataset import ODD_SERVICES, make_dataset
from ._reference import _contains_phrase, _expected_logs, _in_range, _log_key, _tokens
from ._support import MINUTE, SECOND, MakeStore, _all_pages, _equal, _expect, _rejected


async def check_search_logs_filters(make_store: MakeStore) -> None:
    """Without text: newest first, every filter, pages without loss or repeats."""
    data = make_dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(logs=data.logs))
        trace_id = next(r.trace_id for r in data.logs if r.trace_id)
        cases: list[tuple[LogQuery, list[LogRecord]]] = [
            (LogQuery(time_range=data.window), _expected_logs(data.logs, data.window)),
            (
                LogQuery(time_range=data.window, service_name=ODD_SERVICES[2]),
                _expected_logs(data.logs, data.window, service=ODD_SERVICES[2]),
            ),
            (
                LogQuery(time_range=data.window, min_severity_number=17),
                _expected_logs(data.logs, data.window, min_severity=17),
            ),
            (
                LogQuery(time_range=data.window, trace_id=trace_id),
                _expected_logs(data.logs, data.window, trace_id=trace_id),
            ),
            # Attributes: a log record attribute (an int, compared as text), a resource
            # attribute, and both at once.
            (
                LogQuery(time_range=data.window, attributes={"thread.id": "2"}),
                _expected_logs(data.logs, data.window, attributes={"thread.id": "2"}),
            ),
            (
                LogQuery(time_range=data.window, attributes={"service.name": "checkout"}),
                _expected_logs(data.logs, data.window, attributes={"service.name": "checkout"}),
            ),
            (
                LogQuery(
                    time_range=data.window,
                    attributes={"log.iostream": "stdout", "thread.id": "1"},
                ),
                _expected_logs(
                    data.logs,
                    data.window,
                    attributes={"log.iostream": "stdout", "thread.id": "1"},
                ),
            ),
            (
                LogQuery(
                    time_range=TimeRange(
                        start_unix_nano=data.base + 10 * MINUTE,
                        end_unix_nano=data.base + 20 * MINUTE,
                    ),
                    service_name="checkout",
                    min_severity_number=9,
                ),
                _expected_logs(
                    data.logs,
                    TimeRange(
                        start_unix_nano=data.base + 10 * MINUTE,
                        end_unix_nano=data.base + 20 * MINUTE,
                    ),
                    service="checkout",
                    min_severity=9,
                ),
            ),
        ]
        for query, expected in cases:
            _expect(bool(expected), f"the dataset has logs for {query}")
            page = await store.search_logs(query, limit=MAX_LIMIT)
            _equal(
                sorted(map(_log_key, page.items)),
                sorted(map(_log_key, expected)),
                f"search_logs({query}) records",
            )
            times = [r.time_unix_nano for r in page.items]
            _equal(times, sorted(times, reverse=True), f"search_logs({query}): newest first")
            for limit in (1, 4):
                paged = await _all_pages(
                    partial(store.search_logs, query, limit=limit),
                    f"search_logs pages of {limit}",
                )
                _equal(paged, page.items, f"search_logs({query}) paged by {limit}")
        # An attribute condition no record meets (a value of another key, a missing key)
        # selects nothing.
        for attributes in ({"thread.id": "2", "log.iostream": "stderr"}, {"no.such.key": "1"}):
            _expect(
                not _expected_logs(data.logs, data.window, attributes=attributes),
                f"no dataset log has {attributes}",
            )
            none = await store.search_logs(
                LogQuery(time_range=data.window, attributes=attributes), limit=MAX_LIMIT
            )
            _equal(none.items, [], f"search_logs(attributes={attributes})")
        # Records come back whole.
        record = data.logs[4]
        found = await store.search_logs(
            LogQuery(
                time_range=TimeRange(
                    start_unix_nano=record.time_unix_nano,
                    end_unix_nano=record.time_unix_nano + 1,
                ),
                service_name=record.service_name,
            ),
            limit=10,
        )
        _equal(found.items, [record], "a log record round-tripped")


async def check_search_logs_text(make_store: MakeStore) -> None:
    """Words (all), phrases, prefixes, case; BM25 puts the best match first; paging."""
    data = make_dataset()
    extra = [
        LogRecord(
            time_unix_nano=data.base + 5 * SECOND,
            severity_number=17,
            body="deadline deadline deadline",
            service_name="frontend",
        ),
        LogRecord(
            time_unix_nano=data.base + 6 * SECOND,
            severity_number=17,
            body="a very long message that mentions the deadline only once among many other "
            "words about carts, orders, payments, users, sessions and warehouses",
            service_name="frontend",
        ),
        LogRecord(
            time_unix_nano=data.base + 7 * SECOND,
            severity_number=9,
            body='query was "body:foo AND (bar OR NEAR(x y))" from the search box',
            service_name="frontend",
        ),
    ]
    logs = [*data.logs, *extra]
    async with make_store() as store:
        await store.write(TelemetryBatch(logs=logs))
        window = data.window

        def expect(predicate: Callable[[str], bool]) -> list[LogRecord]:
            return [r for r in logs if _in_range(r.time_unix_nano, window) and predicate(r.body)]

        cases: list[tuple[str, list[LogRecord]]] = [
            ("timeout", expect(lambda b: "timeout" in _tokens(b))),
            ("ORDER not", expect(lambda b: {"order", "not"} <= set(_tokens(b)))),
            ('"card expired"', expect(lambda b: _contains_phrase(b, "card expired"))),
            ('"expired card"', expect(lambda b: _contains_phrase(b, "expired card"))),
            ("retry*", expect(lambda b: any(t.startswith("retry") for t in _tokens(b)))),
            ('"cache mi"*', expect(lambda b: _contains_phrase(b, "cache mi", prefix=True))),
            ("inventory-db", expect(lambda b: _contains_phrase(b, "inventory-db"))),
            ("zürich", expect(lambda b: "zürich" in _tokens(b))),
            ('"body:foo AND (bar"', expect(lambda b: _contains_phrase(b, "body foo and bar"))),
            ("nosuchwordanywhere", []),
        ]
        for text, expected in cases:
            # Two cases must find nothing: word order matters in a phrase; unknown words.
            _expect(
                bool(expected) != (text in ('"expired card"', "nosuchwordanywhere")),
                f"the dataset has (or, for the two negative cases, lacks) {text!r}",
            )
            page = await store.search_logs(LogQuery(time_range=window, text=text), limit=MAX_LIMIT)
            _equal(
                sorted(map(_log_key, page.items)),
                sorted(map(_log_key, expected)),
                f"search_logs(text={text!r})",
            )
            paged = await _all_pages(
                partial(store.search_logs, LogQuery(time_range=window, text=text), limit=3),
                f"search_logs(text={text!r}) pages",
            )
            _equal(paged, page.items, f"search_logs(text={text!r}) paged by 3")
        ranked = await store.search_logs(LogQuery(time_range=window, text="deadline"), limit=10)
        _equal(
            [r.body for r in ranked.items],
            [extra[0].body, extra[1].body],
            "BM25: the record dense in the word ranks first",
        )
        combined = await store.search_logs(
            LogQuery(
                time_range=window, text="order", service_name="checkout", min_severity_number=9
            ),
            limit=MAX_LIMIT,
        )
        _equal(
            sorted(map(_log_key, combined.items)),
            sorted(
                map(
                    _log_key,
                    [
                        r
                        for r in _expected_logs(logs, window, service="checkout", min_severity=9)
                        if "order" in _tokens(r.body)
                    ],
                )
            ),
            "text with service and severity filters",
        )
        for bad in (
            "foo AND bar",
            "foo OR bar",
            "NOT foo",
            "NEAR(foo bar)",
            '"unbalanced',
            "body:foo",
            "(foo)",
            "^foo",
            "-foo",
            "fo*o",
            "",
            "   ",
            "***",
            # No letter or digit: nothing any tokenizer indexes ("_" separates words), so
            # "no word to search for" rather than a search that can only find nothing.
            "_",
            '"_"*',
            '"__" ---',
        ):
            await _rejected(
                store.search_logs(LogQuery(time_range=window, text=bad), limit=10),
                "text",
                f"search_logs(text={bad!r})",
            )
        await _rejected(
            store.search_logs(LogQuery(time_range=window, trace_id="nope"), limit=10),
            "trace_id",
            "search_logs with a bad trace_id",
        )
