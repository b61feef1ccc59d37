"""Every decoder on the real files in ``tests/data``, and the robustness cases they hold.

Expected counts and values are computed from the files with plain ``json`` / ``csv`` parsing
(``_support``), never with the code under test. Each robustness case the issue names is pinned
on real data where the data has it: a span without a service name (``zipkin/envoy.json``),
clock skew (``zipkin/skew.json``), corrupt timestamps (the Nezha logs' year-1754
``TimeUnixNano``), odd service names (``zipkin/yelp.json``), non-ASCII and control characters
(node_exporter's DMI labels), repeated timestamps (NAB). NaN/±Inf values appear in no shared
file, so those cases use small inputs written here.
"""

import base64
import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from coremetry.ingest import (
    Decoded,
    MalformedInput,
    UnknownFormat,
    detect_format,
)
from coremetry.ingest.csv_series import decode_csv_series
from coremetry.ingest.jaeger import decode_jaeger
from coremetry.ingest.otlp import (
    decode_logs_json,
    decode_logs_protobuf,
    decode_metrics_json,
    decode_metrics_protobuf,
    decode_otlp_json_document,
    decode_traces_json,
    decode_traces_protobuf,
)
from coremetry.ingest.prometheus import decode_prometheus
from coremetry.ingest.zipkin import decode_zipkin
from coremetry.store import UNKNOWN_SERVICE, SpanKind, StatusCode

from ._support import (
    JAEGER_FILE,
    OTLP_DIR,
    PROMETHEUS_FILE,
    ZIPKIN_DIR,
    as_list,
    as_object,
    iso_ns,
    jaeger_span_count,
    load_json,
    nab_expected_points,
    nab_files,
    nab_rows,
    nab_time_ns,
    nezha_log_rows,
    otlp_counts,
    otlp_files,
    prometheus_expected_points,
    prometheus_sample_lines,
    zipkin_error_spans,
    zipkin_expected_spans,
    zipkin_files,
    zipkin_records,
)

SCRAPE_NS = 1_700_000_000_000_000_000


# ---- format detection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        *[(p, "otlp-json") for p in otlp_files()],
        *[(p, "zipkin") for p in zipkin_files()],
        (JAEGER_FILE, "jaeger"),
        (PROMETHEUS_FILE, "prometheus"),
        *[(p, "csv") for p in nab_files()],
    ],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_format_is_detected_from_content(path: Path, expected: str) -> None:
    assert detect_format(path.read_bytes()) == expected


def test_unknown_content_asks_for_format() -> None:
    readme = (OTLP_DIR / "README.md").read_bytes()
    with pytest.raises(UnknownFormat, match="--format"):
        detect_format(readme)


# ---- OTLP JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", otlp_files(), ids=lambda p: p.name)
def test_otlp_json_files_decode_every_item(path: Path) -> None:
    expected = otlp_counts(path)
    decoded = decode_otlp_json_document(path.read_bytes())
    assert decoded.rejected == []
    assert len(decoded.batch.spans) == expected["span"]
    assert len(decoded.batch.logs) == expected["log"]
    assert len(decoded.batch.metrics) == expected["metric_point"]


def test_otlp_trace_fields_follow_the_json_mapping() -> None:
    source = as_object(load_json(OTLP_DIR / "trace.json"))
    raw = as_object(
        as_list(
            as_object(as_list(as_object(as_list(source["resourceSpans"])[0])["scopeSpans"])[0])[
                "spans"
            ]
        )[0]
    )
    (span,) = decode_traces_json((OTLP_DIR / "trace.json").read_bytes()).batch.spans
    # hex ids are case-insensitive on the wire, lower case in the store
    assert span.trace_id == str(raw["traceId"]).lower()
    assert span.span_id == str(raw["spanId"]).lower()
    assert span.parent_span_id == str(raw["parentSpanId"]).lower()
    # int64 sent as decimal strings
    assert span.start_time_unix_nano == int(str(raw["startTimeUnixNano"]))
    assert span.end_time_unix_nano == int(str(raw["endTimeUnixNano"]))
    assert span.kind is SpanKind.SERVER  # "kind": 2
    assert span.service_name == "my.service"
    assert span.scope_name == "my.library"
    assert span.attributes == {"my.span.attr": "some value"}


def test_otlp_log_attributes_are_flattened() -> None:
    (record,) = decode_logs_json((OTLP_DIR / "logs.json").read_bytes()).batch.logs
    assert record.body == "Example log record"
    assert record.severity_number == 10
    assert record.severity_text == "Information"
    assert record.attributes == {
        "string.attribute": "some string",
        "boolean.attribute": True,
        "int.attribute": 10,  # intValue "10"
        "double.attribute": 637.704,
        "array.attribute": ["many", "values"],
        "map.attribute.some.map.key": "some value",  # kvlistValue -> dotted keys
    }
    assert record.trace_id == "5b8efff798038103d269b633813fc60c"


def test_otlp_event_keeps_its_name_and_structured_body() -> None:
    (record,) = decode_logs_json((OTLP_DIR / "events.json").read_bytes()).batch.logs
    assert record.attributes["event.name"] == "browser.page_view"
    assert json.loads(record.body) == {
        "type": 0,
        "url": "https://www.guidgenerator.com/online-guid-generator.aspx",
        "referrer": "https://wwww.google.com",
        "title": "Free Online GUID Generator",
    }


def test_otlp_metric_types() -> None:
    decoded = decode_metrics_json((OTLP_DIR / "metrics.json").read_bytes())
    points = {p.name: p for p in decoded.batch.metrics}
    counter = points["my.counter"]
    assert (counter.type, counter.is_monotonic, counter.temporality, counter.value) == (
        "sum",
        True,
        "delta",
        5.0,
    )
    assert points["my.gauge"].type == "gauge"
    assert points["my.gauge"].value == 10.0
    histogram = points["my.histogram"].histogram
    assert histogram is not None
    assert (histogram.count, histogram.sum, histogram.bucket_counts, histogram.explicit_bounds) == (
        2,
        2.0,
        [1, 1],
        [1.0],
    )
    # exponential histogram (scale 0, zero count 1, positive offset 1, counts [0, 2]):
    # buckets (2, 4] and (4, 8] under base 2, converted to explicit bounds, and said so
    exponential = points["my.exponential.histogram"].histogram
    assert exponential is not None
    assert exponential.count == 3
    assert sum(exponential.bucket_counts) == 3
    assert exponential.explicit_bounds == [0.0, 4.0, 8.0]
    assert exponential.bucket_counts == [1, 0, 2, 0]
    assert any("exponential" in note for note in decoded.notes)


def _hex_ids_to_base64(value: object) -> object:
    """OTLP JSON (hex ids) -> proto3 canonical JSON (base64 bytes), to build protobuf bodies."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(item, str):
                out[key] = base64.b64encode(bytes.fromhex(item)).decode()
            else:
                out[key] = _hex_ids_to_base64(item)
        return out
    if isinstance(value, list):
        return [_hex_ids_to_base64(item) for item in value]
    return value


@pytest.mark.parametrize(
    ("name", "message", "protobuf_decoder", "json_decoder"),
    [
        ("trace.json", ExportTraceServiceRequest, decode_traces_protobuf, decode_traces_json),
        ("logs.json", ExportLogsServiceRequest, decode_logs_protobuf, decode_logs_json),
        ("events.json", ExportLogsServiceRequest, decode_logs_protobuf, decode_logs_json),
        ("metrics.json", ExportMetricsServiceRequest, decode_metrics_protobuf, decode_metrics_json),
    ],
)
def test_protobuf_and_json_give_the_same_records(
    name: str,
    message: type[Message],
    protobuf_decoder: Callable[[bytes], Decoded],
    json_decoder: Callable[[bytes], Decoded],
) -> None:
    text = (OTLP_DIR / name).read_bytes()
    request = message()
    json_format.ParseDict(as_object(_hex_ids_to_base64(json.loads(text))), request)
    body = request.SerializeToString()
    from_protobuf = protobuf_decoder(body)
    from_json = json_decoder(text)
    assert from_protobuf.batch == from_json.batch
    assert len(from_protobuf.batch) > 0


def test_corrupt_log_times_fall_back_to_the_observed_time_and_are_reported() -> None:
    # Real Nezha rows: 24 of 13_15_log.csv carry TimeUnixNano -6795364578871345152 (year 1754)
    # while their Timestamp column is right.
    rows = nezha_log_rows("13_15_log.csv")
    corrupt = [row for row in rows if int(row["TimeUnixNano"]) < 0]
    assert len(corrupt) == 24
    records = [
        {
            "timeUnixNano": row["TimeUnixNano"],
            "observedTimeUnixNano": str(iso_ns(row["Timestamp"])),
            "severityText": "INFO",
            "traceId": row["TraceID"],
            "spanId": row["SpanID"],
            "body": {"stringValue": row["Log"]},
        }
        for row in rows
    ]
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}).encode()
    decoded = decode_logs_json(body)
    assert decoded.rejected == []
    assert len(decoded.batch.logs) == len(rows)
    fallback = [n for message, n in decoded.notes.items() if "observedTimeUnixNano" in message]
    assert fallback == [24]
    for row, record in zip(rows, decoded.batch.logs, strict=True):
        expected = (
            int(row["TimeUnixNano"]) if int(row["TimeUnixNano"]) > 0 else iso_ns(row["Timestamp"])
        )
        assert record.time_unix_nano == expected
        assert record.severity_number == 9  # from the level text


def test_corrupt_log_times_without_a_fallback_are_rejected_with_a_reason() -> None:
    rows = [row for row in nezha_log_rows("13_16_log.csv") if int(row["TimeUnixNano"]) < 0]
    assert len(rows) == 18
    records = [
        {"timeUnixNano": row["TimeUnixNano"], "body": {"stringValue": row["Log"]}} for row in rows
    ]
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}).encode()
    decoded = decode_logs_json(body)
    assert decoded.batch.logs == []
    assert len(decoded.rejected) == 18
    assert {r.reason for r in decoded.rejected} == {
        "log record has no usable time (timeUnixNano and observedTimeUnixNano missing or "
        "outside 1970..2262)"
    }
    assert decoded.rejected[0].where == "resourceLogs[0].scopeLogs[0].logRecords[0]"


def test_bad_items_are_rejected_and_the_rest_kept() -> None:
    spans = [
        {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": "eee19b7ec3c1b174",
            "name": "ok",
            "startTimeUnixNano": "1544712660000000000",
            "endTimeUnixNano": "1544712661000000000",
        },
        {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": "eee19b7ec3c1b175",
            "name": "no start",
        },
        {"traceId": "", "spanId": "eee19b7ec3c1b176", "startTimeUnixNano": "1"},
        {"traceId": "zz", "spanId": "eee19b7ec3c1b177", "startTimeUnixNano": "1"},
    ]
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    decoded = decode_traces_json(body)
    assert [s.name for s in decoded.batch.spans] == ["ok"]
    assert decoded.batch.spans[0].service_name == UNKNOWN_SERVICE
    reasons = [r.reason for r in decoded.rejected]
    assert reasons[0] == "span start time is missing or outside 1970..2262"
    assert reasons[1] == "span has no trace_id"
    assert reasons[2].startswith("traceId is not up to 32 hex characters")
    assert decoded.describe_rejections().startswith(
        "1 span(s): span start time is missing or outside 1970..2262 "
        "(at resourceSpans[0].scopeSpans[0].spans[1]); 1 span(s): span has no trace_id"
    )


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"not json at all", "not JSON"),
        (b'{"resourceSpans": 5}', "$.resourceSpans"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "SERVER"}]}]}]}',
            "$.resourceSpans[0].scopeSpans[0].spans[0].kind",
        ),
    ],
)
def test_malformed_json_bodies_name_what_is_wrong(body: bytes, needle: str) -> None:
    with pytest.raises(MalformedInput) as caught:
        decode_traces_json(body)
    assert needle in str(caught.value)


def test_malformed_protobuf_is_refused() -> None:
    with pytest.raises(MalformedInput, match="not a protobuf ExportTraceServiceRequest"):
        decode_traces_protobuf(b"\xff\xff\xff\xff")


def test_otlp_json_lines_file() -> None:
    lines = b"\n".join(
        json.dumps(json.loads((OTLP_DIR / name).read_bytes())).encode()
        for name in ("trace.json", "logs.json", "metrics.json")
    )
    decoded = decode_otlp_json_document(lines)
    assert (len(decoded.batch.spans), len(decoded.batch.logs), len(decoded.batch.metrics)) == (
        1,
        1,
        4,
    )
    with pytest.raises(MalformedInput, match="line 2"):
        decode_otlp_json_document(lines.replace(b'"resourceLogs"', b'"resourceLogs": 1, "x"', 1))


# ---- Zipkin -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", zipkin_files(), ids=lambda p: p.name)
def test_zipkin_files_decode_every_span(path: Path) -> None:
    records = zipkin_records(path)
    decoded = decode_zipkin(path.read_bytes())
    assert decoded.rejected == []
    assert decoded.read["span"] == len(records)
    assert len(decoded.batch.spans) == zipkin_expected_spans(path)
    # one span per id: shared client/server ids were split
    assert len({(s.trace_id, s.span_id) for s in decoded.batch.spans}) == len(decoded.batch.spans)
    # 64-bit trace ids are left-padded to 32 hex
    assert {s.trace_id for s in decoded.batch.spans} == {
        str(r["traceId"]).rjust(32, "0") for r in records
    }
    assert sum(1 for s in decoded.batch.spans if s.status_code is StatusCode.ERROR) == (
        zipkin_error_spans(path)
    )
    # every parent is a stored span, or a parent the file itself names but does not hold
    stored = {s.span_id for s in decoded.batch.spans}
    file_ids = {str(r["id"]) for r in records}
    dangling_in_file = {str(r["parentId"]) for r in records if "parentId" in r} - file_ids
    for span in decoded.batch.spans:
        if span.parent_span_id:
            assert span.parent_span_id in stored | dangling_in_file


def test_zipkin_span_without_service_name_is_unknown_service() -> None:
    (span,) = decode_zipkin((ZIPKIN_DIR / "envoy.json").read_bytes()).batch.spans
    assert span.service_name == UNKNOWN_SERVICE
    assert span.kind is SpanKind.SERVER
    assert span.trace_id == "0000000000000000978883983d506fa5"
    assert span.attributes["http.status_code"] == "200"
    assert span.duration_ns == 127115 * 1000


def test_zipkin_clock_skew_is_kept_as_sent() -> None:
    records = zipkin_records(ZIPKIN_DIR / "skew.json")
    decoded = decode_zipkin((ZIPKIN_DIR / "skew.json").read_bytes())
    by_name = {(s.service_name, s.name, s.kind): s for s in decoded.batch.spans}
    # servicea's "get" calls serviceb; serviceb's server side starts 62 ms *before* its caller
    client = by_name[("servicea", "post", SpanKind.CLIENT)]
    server = by_name[("serviceb", "post", SpanKind.SERVER)]
    assert server.parent_span_id == client.span_id
    assert server.start_time_unix_nano < client.start_time_unix_nano
    server_record = next(r for r in records if r.get("kind") == "SERVER" and r.get("shared"))
    assert server.start_time_unix_nano == int(str(server_record["timestamp"])) * 1000
    # the async child reported by serviceb hangs under serviceb's half of the shared span
    child = by_name[("serviceb", "async", SpanKind.UNSPECIFIED)]
    assert child.parent_span_id == server.span_id


def test_zipkin_odd_service_names_and_edges() -> None:
    decoded = decode_zipkin((ZIPKIN_DIR / "yelp.json").read_bytes())
    services = {s.service_name for s in decoded.batch.spans}
    expected = {
        str(as_object(r.get("localEndpoint", {})).get("serviceName"))
        for r in zipkin_records(ZIPKIN_DIR / "yelp.json")
    }
    assert services == expected
    assert "yelp_main/api_proxy" in services
    assert "unknown" in services
    by_id = {s.span_id: s for s in decoded.batch.spans}
    edges = {
        (by_id[s.parent_span_id].service_name, s.service_name)
        for s in decoded.batch.spans
        if s.parent_span_id in by_id and by_id[s.parent_span_id].service_name != s.service_name
    }
    # the server halves of shared spans make the true caller -> callee edges
    assert ("mobile_api", "spectre") in edges
    assert ("yelp-main", "mobile_api") in edges


def test_zipkin_fragments_merge_into_their_span() -> None:
    path = ZIPKIN_DIR / "smartthings-mobile-web-install.json"
    records = zipkin_records(path)
    fragments = [r for r in records if "timestamp" not in r]
    assert len(fragments) == 84
    decoded = decode_zipkin(path.read_bytes())
    assert decoded.notes["Zipkin span fragment (no timestamp) merged into its span"] == 84
    without_duration = sum(1 for r in records if "timestamp" in r and "duration" not in r)
    assert decoded.notes["Zipkin span without duration; stored with duration 0"] == without_duration


# ---- Jaeger -------------------------------------------------------------------------------------


def test_jaeger_query_api_json() -> None:
    data = as_object(as_object(load_json(JAEGER_FILE))["data"])
    decoded = decode_jaeger(JAEGER_FILE.read_bytes())
    assert decoded.rejected == []
    assert len(decoded.batch.spans) == jaeger_span_count(JAEGER_FILE)
    processes = as_object(data["processes"])
    for raw, span in zip(as_list(data["spans"]), decoded.batch.spans, strict=True):
        record = as_object(raw)
        assert span.span_id == record["spanID"]
        assert span.name == record["operationName"]
        assert span.start_time_unix_nano == int(str(record["startTime"])) * 1000
        assert span.duration_ns == int(str(record["duration"])) * 1000
        process = as_object(processes[str(record["processID"])])
        assert span.service_name == process["serviceName"]
        references = [as_object(r) for r in as_list(record["references"])]
        child_of = [r for r in references if r["refType"] == "CHILD_OF"]
        assert span.parent_span_id == (str(child_of[0]["spanID"]) if child_of else "")
        tags = {str(as_object(t)["key"]): as_object(t) for t in as_list(record["tags"])}
        if "span.kind" in tags:
            assert span.kind.name == str(tags["span.kind"]["value"]).upper()
            assert "span.kind" not in span.attributes
        for key, tag in tags.items():
            if key != "span.kind":
                assert span.attributes[key] == tag["value"]  # typed: int64 stays an int
    assert decoded.batch.spans[1].attributes["http.status_code"] == 200


def test_jaeger_error_tag_and_bare_trace() -> None:
    trace = {
        "traceID": "abc",
        "spans": [
            {
                "traceID": "abc",
                "spanID": "1",
                "operationName": "op",
                "startTime": 1660049722779884,
                "duration": 5,
                "processID": "p1",
                "tags": [{"key": "error", "type": "bool", "value": True}],
                "logs": [
                    {
                        "timestamp": 1660049722779885,
                        "fields": [
                            {"key": "event", "type": "string", "value": "exception"},
                            {"key": "message", "type": "string", "value": "boom"},
                        ],
                    }
                ],
            },
        ],
        "processes": {
            "p1": {"serviceName": "", "tags": [{"key": "host", "type": "string", "value": "h"}]}
        },
    }
    (span,) = decode_jaeger(json.dumps(trace).encode()).batch.spans
    assert span.trace_id == "abc".rjust(32, "0")
    assert span.status_code is StatusCode.ERROR
    assert span.service_name == UNKNOWN_SERVICE
    assert span.resource_attributes == {"host": "h", "service.name": UNKNOWN_SERVICE}
    assert [(e.name, e.attributes) for e in span.events] == [("exception", {"message": "boom"})]


# ---- Prometheus ---------------------------------------------------------------------------------


def test_prometheus_scrape_is_one_sample_set() -> None:
    lines = prometheus_sample_lines(PROMETHEUS_FILE)
    decoded = decode_prometheus(PROMETHEUS_FILE.read_bytes(), scrape_unix_nano=SCRAPE_NS)
    assert decoded.rejected == []
    assert decoded.read["metric_point"] == len(lines) == 3027
    assert len(decoded.batch.metrics) == prometheus_expected_points(PROMETHEUS_FILE)
    assert {p.time_unix_nano for p in decoded.batch.metrics} == {SCRAPE_NS}
    # every sample name as written (counters keep their _total)
    assert Counter(p.name for p in decoded.batch.metrics) == Counter(
        line.split("{")[0].split(" ")[0] for line in lines
    )


def test_prometheus_types_map_to_otel() -> None:
    text = PROMETHEUS_FILE.read_text(encoding="utf-8")
    types: dict[str, str] = {}
    for line in text.split("\n"):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
    decoded = decode_prometheus(PROMETHEUS_FILE.read_bytes(), scrape_unix_nano=SCRAPE_NS)
    for point in decoded.batch.metrics:
        family = types.get(point.name, "untyped")
        if family == "counter":
            assert (point.type, point.is_monotonic, point.temporality) == (
                "sum",
                True,
                "cumulative",
            )
        else:
            assert point.type == "gauge", point.name


def test_prometheus_label_values_keep_control_and_replacement_characters() -> None:
    # node_exporter's DMI product_version is "\ufffd\x1c[\ufffd": \x1c is a line break to
    # str.splitlines, not to the exposition format
    decoded = decode_prometheus(PROMETHEUS_FILE.read_bytes(), scrape_unix_nano=SCRAPE_NS)
    (dmi,) = [p for p in decoded.batch.metrics if p.name == "node_dmi_info"]
    assert dmi.attributes["product_version"] == "\ufffd\x1c[\ufffd"
    assert dmi.attributes["product_name"] == "PowerEdge R6515"


def test_prometheus_special_values_histograms_and_summaries() -> None:
    text = b"""# TYPE up gauge
up{job="api",instance="a:1"} NaN
up{job="api",instance="b:1"} +Inf
up{job="api",instance="c:1"} -Inf 1395066363000
# TYPE requests counter
requests 7
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 2
latency_seconds_bucket{le="1"} 5
latency_seconds_bucket{le="+Inf"} 6
latency_seconds_sum 3.5
latency_seconds_count 6
# TYPE rpc_seconds summary
rpc_seconds{quantile="0.5"} 0.2
rpc_seconds{quantile="0.99"} 1.5
rpc_seconds_sum 40
rpc_seconds_count 100
"""
    decoded = decode_prometheus(text, scrape_unix_nano=SCRAPE_NS, service_name="fallback")
    points = decoded.batch.metrics
    ups = [p for p in points if p.name == "up"]
    assert math.isnan(ups[0].value or 0.0)
    assert ups[1].value == math.inf
    assert ups[2].value == -math.inf
    assert ups[2].time_unix_nano == 1395066363000 * 10**6  # the sample's own timestamp (ms)
    assert {p.service_name for p in ups} == {"api"}  # job -> service.name
    (requests,) = [p for p in points if p.name == "requests"]  # declared without _total
    assert (requests.type, requests.service_name) == ("sum", "fallback")
    (latency,) = [p for p in points if p.name == "latency_seconds"]
    assert latency.histogram is not None
    assert (latency.histogram.explicit_bounds, latency.histogram.bucket_counts) == (
        [0.1, 1.0],
        [2, 3, 1],
    )
    assert (latency.histogram.count, latency.histogram.sum) == (6, 3.5)
    quantiles = {p.attributes["quantile"]: p.value for p in points if p.name == "rpc_seconds"}
    assert quantiles == {"0.5": 0.2, "0.99": 1.5}
    assert {p.name: p.type for p in points if p.name.startswith("rpc_seconds_")} == {
        "rpc_seconds_sum": "sum",
        "rpc_seconds_count": "sum",
    }
    assert decoded.read["metric_point"] == 13
    assert len(points) == 13 - 5 + 1  # the histogram's five samples are one point


def test_prometheus_bad_line_names_its_number() -> None:
    with pytest.raises(MalformedInput, match=r"line 3: .*'bad\{x=\"1\"\} notanumber'"):
        decode_prometheus(
            b'# TYPE a gauge\na 1\nbad{x="1"} notanumber\n', scrape_unix_nano=SCRAPE_NS
        )


# ---- CSV ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", nab_files(), ids=lambda p: p.name)
def test_nab_csv_series(path: Path) -> None:
    rows = nab_rows(path)
    decoded = decode_csv_series(
        path.read_bytes(), metric_name=path.stem, labels={"source": "nab"}, unit="%"
    )
    assert decoded.read["metric_point"] == len(rows)
    assert len(decoded.batch.metrics) == nab_expected_points(path)
    assert len(decoded.rejected) == len(rows) - nab_expected_points(path)
    first = decoded.batch.metrics[0]
    assert first.time_unix_nano == nab_time_ns(rows[0][0])  # the zone-less times are UTC
    assert first.value == float(rows[0][1])
    assert (first.name, first.type, first.unit, first.attributes) == (
        path.stem,
        "gauge",
        "%",
        {"source": "nab"},
    )


def test_csv_repeated_timestamps_are_rejected_naming_the_lines() -> None:
    path = next(p for p in nab_files() if p.name == "machine_temperature_system_failure.csv")
    rows = nab_rows(path)
    decoded = decode_csv_series(path.read_bytes(), metric_name="t")
    assert len(decoded.rejected) == 12
    first_seen: dict[str, int] = {}
    for line, (timestamp, _) in enumerate(rows, start=2):
        first_seen.setdefault(timestamp, line)
    rejected = decoded.rejected[0]
    line = int(rejected.where.split()[1])
    timestamp = rows[line - 2][0]
    assert rejected.where == f"line {line} (repeats line {first_seen[timestamp]})"
    kept = {p.time_unix_nano: p.value for p in decoded.batch.metrics}
    assert kept[nab_time_ns(timestamp)] == float(rows[first_seen[timestamp] - 2][1])


def test_csv_special_values_and_bad_rows() -> None:
    text = (
        b"timestamp,value\n2024-01-01 00:00:00,NaN\n2024-01-01T00:01:00Z,inf\n"
        b"1704067320,-inf\n1704067380000,1.5\nyesterday,1\n2024-01-01 00:07:00,\n"
        b"2024-01-01 00:08:00,abc\n"
    )
    decoded = decode_csv_series(text, metric_name="m")
    values = [p.value for p in decoded.batch.metrics]
    assert math.isnan(values[0] or 0.0)
    assert values[1:] == [math.inf, -math.inf, 1.5]
    assert [p.time_unix_nano // 10**9 for p in decoded.batch.metrics] == [
        1704067200,
        1704067260,
        1704067320,
        1704067380,
    ]
    assert [(r.where, r.reason) for r in decoded.rejected] == [
        ("line 6", "timestamp does not parse (use YYYY-MM-DD HH:MM:SS, ISO 8601 or unix time)"),
        ("line 7", "value is empty"),
        ("line 8", "value is not a number"),
    ]


def test_csv_without_value_column_is_refused() -> None:
    with pytest.raises(MalformedInput, match="line 1: the header"):
        decode_csv_series(b"when,what\nx,y\n", metric_name="m")


def test_unusable_buckets_are_rejected_not_fatal() -> None:
    prometheus = decode_prometheus(
        b'# TYPE h histogram\nh_bucket{le="x"} 1\nh_bucket{le="+Inf"} 2\nh_count 2\nh_sum 1\n'
        b"# TYPE g gauge\ng 1\n",
        scrape_unix_nano=SCRAPE_NS,
    )
    assert [p.name for p in prometheus.batch.metrics] == ["g"]
    assert [r.reason for r in prometheus.rejected] == [
        "histogram bucket has an le label that is not a number"
    ]
    point = {
        "timeUnixNano": "1700000000000000000",
        "count": "1",
        "scale": -11,  # base 2**2048: its bounds do not fit a double
        "positive": {"offset": 3, "bucketCounts": ["1"]},
    }
    body = json.dumps(
        {
            "resourceMetrics": [
                {
                    "scopeMetrics": [
                        {
                            "metrics": [
                                {"name": "e", "exponentialHistogram": {"dataPoints": [point]}}
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()
    decoded = decode_metrics_json(body)
    assert decoded.batch.metrics == []
    assert decoded.rejected[0].reason.startswith("exponential histogram bucket bounds overflow")
