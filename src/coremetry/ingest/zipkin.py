"""Zipkin v2 JSON (a list of spans, as ``POST /api/v2/spans`` takes) to store spans.

Field mapping (https://zipkin.io/zipkin-api/#/default/post_spans, and the OpenTelemetry
Collector's Zipkin receiver for the OTel side):

- ``traceId`` (16 or 32 hex) -> ``trace_id`` left-padded to 32; ``id`` -> ``span_id``;
  ``parentId`` -> ``parent_span_id``.
- ``timestamp`` / ``duration`` (microseconds) -> start / end in nanoseconds. A span without
  ``duration`` (a one-way message, an unfinished span) is stored with duration 0, and said so;
  a negative ``duration`` (the API's minimum is 1) is rejected, never stored as 0.
- ``kind`` CLIENT/SERVER/PRODUCER/CONSUMER -> the same OTel kind; absent -> UNSPECIFIED.
- ``localEndpoint.serviceName`` -> ``service_name`` (absent or empty -> ``unknown_service``);
  its ``ipv4``/``ipv6``/``port`` -> ``network.local.address`` / ``network.local.port``.
- ``remoteEndpoint.serviceName`` -> ``peer.service``; its address and port ->
  ``network.peer.address`` / ``network.peer.port``.
- ``tags`` -> attributes (strings, as Zipkin has them); the ``error`` tag marks the span ERROR,
  with the tag's text as the status message (``"true"`` and ``""`` give no message).
- ``annotations`` -> span events (``value`` is the event name, ``timestamp`` in microseconds
  its time). An annotation whose ``timestamp`` is missing or outside 1970..2262 is dropped and
  its span kept; the import summary counts it as a note (:data:`BAD_ANNOTATION_TIME`).

Zipkin's B3 propagation lets a client and a server report *the same span id* ("shared" spans),
and real traces also hold fragments: a record without ``timestamp`` that only adds a name or
tags to a span reported elsewhere. OpenTelemetry spans are unique by id, so this decoder does
what Zipkin's own UI does before drawing a trace (``zipkin2.internal.SpanNode``):

1. **Fragments merge.** Records with the same trace id, span id and local endpoint (service,
   address, port) are one span: a record without ``timestamp`` merges into a record with one
   (missing fields filled in, tags and annotations added). Records that each have a
   ``timestamp`` stay separate spans (e.g. a message received by several consumers).
2. **Shared ids split.** When several spans remain with one span id, the client-side one (not
   ``shared``, else the earliest) keeps it; every other gets a new id derived from its trace
   id, span id, local endpoint and timestamp (the same input always gives the same id, so
   imports stay idempotent), its parent becomes the span it shares the id with when that span
   is the client side, and it keeps ``zipkin.span_id`` (the original id) as an attribute.
3. **Children follow.** A span whose ``parentId`` names a split id and whose service is the
   service of one of the split spans (same address preferred) is re-parented to that span.

So every record with a ``timestamp`` becomes one span, and caller->callee edges are true.
Rejected: records without ``traceId``/``id``, with ids that are not hex, spans left without
a ``timestamp`` after merging, with a ``timestamp`` outside 1970..2262, a negative ``duration``,
or a ``timestamp + duration`` past 2262.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

import msgspec

from coremetry.ingest._convert import ItemRejected, hex_span_id, hex_trace_id, is_sane_time
from coremetry.ingest.decoded import Decoded
from coremetry.ingest.errors import MalformedInput
from coremetry.store.model import (
    UNKNOWN_SERVICE,
    Attributes,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
)

__all__ = ["decode_zipkin"]

NO_DURATION: Final = "Zipkin span without duration; stored with duration 0"
NO_TIMESTAMP: Final = "Zipkin span has no timestamp (even after merging its fragments)"
FRAGMENT_MERGED: Final = "Zipkin span fragment (no timestamp) merged into its span"
SHARED_SPLIT: Final = "Zipkin span sharing its id with another got a derived id"
BAD_TIME: Final = "Zipkin span timestamp is outside 1970..2262"
NEGATIVE_DURATION: Final = "Zipkin span duration is negative (microseconds, must be 0 or more)"
BAD_END: Final = "Zipkin span timestamp + duration is past 2262"
BAD_ANNOTATION_TIME: Final = (
    "Zipkin annotation timestamp is missing or outside 1970..2262 (microseconds); "
    "the annotation was dropped, its span kept"
)

_KINDS: Final = {
    "CLIENT": SpanKind.CLIENT,
    "SERVER": SpanKind.SERVER,
    "PRODUCER": SpanKind.PRODUCER,
    "CONSUMER": SpanKind.CONSUMER,
}


class _Endpoint(msgspec.Struct, kw_only=True):
    service_name: str | None = msgspec.field(default=None, name="serviceName")
    ipv4: str | None = None
    ipv6: str | None = None
    port: int | None = None


class _Annotation(msgspec.Struct, kw_only=True):
    timestamp: int = 0  # microseconds; 0 when absent (dropped: see _events)
    value: str = ""


class _ZipkinSpan(msgspec.Struct, kw_only=True):
    """A Zipkin v2 span (wire type; unknown fields ignored)."""

    trace_id: str = msgspec.field(default="", name="traceId")
    id: str = ""
    parent_id: str | None = msgspec.field(default=None, name="parentId")
    name: str | None = None
    kind: str | None = None
    timestamp: int | None = None
    duration: int | None = None
    local_endpoint: _Endpoint | None = msgspec.field(default=None, name="localEndpoint")
    remote_endpoint: _Endpoint | None = msgspec.field(default=None, name="remoteEndpoint")
    annotations: list[_Annotation] = msgspec.field(default_factory=list)
    tags: dict[str, str] = msgspec.field(default_factory=dict)
    shared: bool = False


_DECODER: Final = msgspec.json.Decoder(list[_ZipkinSpan])


class _Draft:
    """One span being assembled from one or more records."""

    __slots__ = (
        "annotations",
        "duration",
        "index",
        "kind",
        "local",
        "name",
        "parent_id",
        "remote",
        "shared",
        "span_id",
        "tags",
        "timestamp",
        "trace_id",
    )

    def __init__(self, record: _ZipkinSpan, index: int, trace_id: str, span_id: str) -> None:
        self.index = index
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = record.parent_id or ""
        self.name = record.name or ""
        self.kind = record.kind
        self.timestamp = record.timestamp
        self.duration = record.duration
        self.local = record.local_endpoint
        self.remote = record.remote_endpoint
        self.annotations = list(record.annotations)
        self.tags = dict(record.tags)
        self.shared = record.shared

    @property
    def service(self) -> str:
        name = self.local.service_name if self.local is not None else None
        return name if name else UNKNOWN_SERVICE

    @property
    def address(self) -> str:
        if self.local is None:
            return ""
        return self.local.ipv4 or self.local.ipv6 or ""

    def endpoint_key(self) -> tuple[str, str, int]:
        port = self.local.port if self.local is not None and self.local.port is not None else 0
        return (self.service, self.address, port)

    def absorb(self, record: _ZipkinSpan) -> None:
        """Merge a fragment of the same span into this one (fill gaps, add tags)."""
        if not self.name and record.name:
            self.name = record.name
        if self.kind is None:
            self.kind = record.kind
        if self.duration is None:
            self.duration = record.duration
        if not self.parent_id and record.parent_id:
            self.parent_id = record.parent_id
        if self.remote is None:
            self.remote = record.remote_endpoint
        self.annotations.extend(record.annotations)
        for key, value in record.tags.items():
            self.tags.setdefault(key, value)
        self.shared = self.shared or record.shared


def _derived_id(draft: _Draft) -> str:
    service, address, port = draft.endpoint_key()
    seed = f"{draft.trace_id}/{draft.span_id}/{service}/{address}/{port}/{draft.timestamp}"
    return hashlib.blake2b(seed.encode(), digest_size=8).hexdigest()


def decode_zipkin(data: bytes) -> Decoded:
    """Decode a Zipkin v2 JSON document (a JSON array of spans).

    Args:
        data: the file's or body's bytes (UTF-8 JSON).

    Returns:
        The spans (see the module docstring for merging and splitting) and rejections.
        ``read["span"]`` counts the JSON records.

    Raises:
        MalformedInput: not a JSON array of Zipkin spans (the message has the JSON path).
    """
    try:
        records = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise MalformedInput(f"not a Zipkin v2 JSON span list: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedInput(f"not JSON: {exc}") from None
    out = Decoded()
    out.count_read("span", len(records))
    drafts = _merge(records, out)
    _split_shared(drafts, out)
    for draft in sorted(drafts, key=lambda d: d.index):
        try:
            out.batch.spans.append(_to_span(draft, out))
        except ItemRejected as exc:
            out.reject("span", exc.reason, f"[{draft.index}] (id {draft.span_id})")
    return out


def _merge(records: Iterable[_ZipkinSpan], out: Decoded) -> list[_Draft]:
    """Group records into drafts: one per timestamped record; fragments merge in."""
    groups: dict[tuple[str, str, tuple[str, str, int]], list[_Draft]] = {}
    fragments: list[tuple[tuple[str, str, tuple[str, str, int]], _ZipkinSpan, int]] = []
    drafts: list[_Draft] = []
    for index, record in enumerate(records):
        try:
            trace_id = hex_trace_id(record.trace_id, "traceId")
            span_id = hex_span_id(record.id, "id")
            if record.parent_id:
                record.parent_id = hex_span_id(record.parent_id, "parentId")
            if not trace_id:
                raise ItemRejected("Zipkin span has no traceId")
            if not span_id:
                raise ItemRejected("Zipkin span has no id")
        except ItemRejected as exc:
            out.reject("span", exc.reason, f"[{index}]")
            continue
        draft = _Draft(record, index, trace_id, span_id)
        key = (trace_id, span_id, draft.endpoint_key())
        if record.timestamp is None:
            fragments.append((key, record, index))
            continue
        groups.setdefault(key, []).append(draft)
        drafts.append(draft)
    by_id: dict[tuple[str, str], _Draft] = {}
    for draft in drafts:
        by_id.setdefault((draft.trace_id, draft.span_id), draft)
    for key, record, index in fragments:
        group = groups.get(key, [])
        if not group and (record.local_endpoint is None or not record.local_endpoint.service_name):
            # No local endpoint: the fragment belongs to whichever span has its id.
            first = by_id.get((key[0], key[1]))
            group = [first] if first is not None else []
        if group:
            group[0].absorb(record)
            out.note(FRAGMENT_MERGED)
            continue
        # A fragment with no timestamped partner: it still names a span; keep it as a draft so
        # that it is rejected with a reason (or absorbs further fragments of the same span).
        draft = _Draft(record, index, key[0], key[1])
        groups[key] = [draft]
        drafts.append(draft)
    return drafts


def _split_shared(drafts: list[_Draft], out: Decoded) -> None:
    """Give every span that shares its id with another one an id of its own (see above)."""
    by_id: dict[tuple[str, str], list[_Draft]] = {}
    for draft in drafts:
        by_id.setdefault((draft.trace_id, draft.span_id), []).append(draft)
    # original (trace, span id) -> the spans it was split into, keeper first
    split: dict[tuple[str, str], list[_Draft]] = {}
    for key, group in by_id.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda d: (d.shared, d.timestamp or 0, d.index))
        keeper = group[0]
        for other in group[1:]:
            original = other.span_id
            other.tags.setdefault("zipkin.span_id", original)
            other.span_id = _derived_id(other)
            if not keeper.shared:
                other.parent_id = original
            out.note(SHARED_SPLIT)
        split[key] = group
    if not split:
        return
    for draft in drafts:
        halves = split.get((draft.trace_id, draft.parent_id))
        if halves is None or draft in halves:
            continue
        same_service = [s for s in halves if s.service == draft.service]
        if not same_service or same_service[0] is halves[0]:
            continue
        same_host = [s for s in same_service if s.address and s.address == draft.address]
        draft.parent_id = (same_host or same_service)[0].span_id


def _endpoint_attributes(endpoint: _Endpoint | None, side: str, attributes: Attributes) -> None:
    if endpoint is None:
        return
    address = endpoint.ipv4 or endpoint.ipv6
    if address:
        attributes[f"network.{side}.address"] = address
    if endpoint.port is not None:
        attributes[f"network.{side}.port"] = endpoint.port


def _to_span(draft: _Draft, out: Decoded) -> Span:
    if draft.timestamp is None:
        raise ItemRejected(NO_TIMESTAMP)
    start = draft.timestamp * 1000
    if not is_sane_time(start):
        raise ItemRejected(BAD_TIME)
    if draft.duration is None:
        out.note(NO_DURATION)
        end = start
    elif draft.duration < 0:
        raise ItemRejected(NEGATIVE_DURATION)
    else:
        end = start + draft.duration * 1000
        if not is_sane_time(end):
            raise ItemRejected(BAD_END)
    attributes: Attributes = dict(draft.tags)
    _endpoint_attributes(draft.local, "local", attributes)
    if draft.remote is not None:
        if draft.remote.service_name:
            attributes["peer.service"] = draft.remote.service_name
        _endpoint_attributes(draft.remote, "peer", attributes)
    status = StatusCode.UNSET
    message = ""
    if "error" in draft.tags:
        status = StatusCode.ERROR
        text = draft.tags["error"]
        message = "" if text.lower() in ("", "true") else text
    service = draft.service
    return Span(
        trace_id=draft.trace_id,
        span_id=draft.span_id,
        parent_span_id=draft.parent_id if draft.parent_id != draft.span_id else "",
        service_name=service,
        name=draft.name,
        kind=_KINDS.get((draft.kind or "").upper(), SpanKind.UNSPECIFIED),
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        status_code=status,
        status_message=message,
        attributes=attributes,
        resource_attributes={"service.name": service},
        events=_events(draft.annotations, out),
        scope_name="",
    )


def _events(annotations: list[_Annotation], out: Decoded) -> list[SpanEvent]:
    """The annotations as span events in time order; unusable times dropped with a note."""
    events: list[SpanEvent] = []
    for annotation in sorted(annotations, key=lambda a: a.timestamp):
        time_unix_nano = annotation.timestamp * 1000
        if not is_sane_time(time_unix_nano):
            out.note(BAD_ANNOTATION_TIME)
            continue
        events.append(SpanEvent(time_unix_nano=time_unix_nano, name=annotation.value))
    return events
