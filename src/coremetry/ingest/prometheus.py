"""Prometheus text exposition format (one scrape) to store metric points.

Parsed with ``prometheus_client``'s text parser (the Prometheus project's Python client). One
scrape is one timestamped sample set: every sample without its own timestamp gets the scrape
time (``coremetry ingest --timestamp``, default: the time of the import), a sample's own
timestamp (milliseconds in the format) wins.

Mapping (the OpenTelemetry spec's Prometheus compatibility rules,
https://opentelemetry.io/docs/specs/otel/compatibility/prometheus_and_openmetrics/):

- Each sample keeps its own name as written (``node_cpu_seconds_total``) and its labels as
  attributes.
- ``counter`` samples -> monotonic cumulative ``sum`` points.
- ``gauge`` and ``untyped`` samples -> ``gauge`` points.
- ``histogram``: the ``_bucket`` (``le``), ``_sum`` and ``_count`` samples of one label set
  become **one** ``histogram`` point (cumulative bucket counts turned into per-bucket counts,
  finite ``le`` values as the bounds), cumulative.
- ``summary``: **kept as gauges of quantiles** -- each ``{quantile="0.5"}`` sample is a
  ``gauge`` point of the summary's name with its ``quantile`` label; ``_sum`` and ``_count``
  are monotonic cumulative ``sum`` points (the store has no summary type).
- ``service_name``: the ``job`` label when a sample has one (the OTel rule), else the
  importer's ``--service-name`` (default ``unknown_service``).
- Values are kept as written, NaN and ±Inf included.

So one sample line is one point, except histograms (one point per label set). Rejected: a
histogram label set without ``_count`` or with no bucket; samples whose timestamp is outside
1970..2262.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Final, TextIO, cast

from prometheus_client.parser import text_fd_to_metric_families
from prometheus_client.samples import Sample, Timestamp

from coremetry.ingest._convert import is_sane_time
from coremetry.ingest.decoded import Decoded
from coremetry.ingest.errors import MalformedInput
from coremetry.store.model import UNKNOWN_SERVICE, Attributes, HistogramValue, MetricPoint

__all__ = ["decode_prometheus"]

_TYPE_LINE: Final = re.compile(r"^\s*#\s*TYPE\s+(\S+)\s+(\S+)")
BAD_TIME: Final = "sample timestamp is outside 1970..2262"
NO_COUNT: Final = "histogram label set has no _count sample"
NO_BUCKETS: Final = "histogram label set has no _bucket samples"
BAD_BOUND: Final = "histogram bucket has an le label that is not a number"


class _Lines:
    """Feeds the parser line by line and remembers where it is (for error messages)."""

    def __init__(self, text: str) -> None:
        # Lines end at "\n" only: str.splitlines() would also split at \x1c-\x1e and \x85,
        # which occur inside label values (node_exporter's DMI strings do).
        self._lines = text.split("\n")
        self.number = 0

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self._lines, start=1):
            self.number = number
            yield line

    def current(self) -> str:
        if 1 <= self.number <= len(self._lines):
            return self._lines[self.number - 1].strip()
        return ""


def _sample_time(sample: Sample, scrape_unix_nano: int) -> int:
    stamp = sample.timestamp
    if stamp is None:
        return scrape_unix_nano
    if isinstance(stamp, Timestamp):
        return stamp.sec * 1_000_000_000 + stamp.nsec
    return round(stamp * 1000) * 1_000_000


def _label_key(labels: dict[str, str], drop: str = "") -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def decode_prometheus(
    data: bytes, *, scrape_unix_nano: int, service_name: str = UNKNOWN_SERVICE
) -> Decoded:
    """Decode one Prometheus text exposition scrape.

    Args:
        data: the scrape (UTF-8 text).
        scrape_unix_nano: the time of the scrape, unix nanoseconds, given to every sample
            without its own timestamp.
        service_name: the ``service_name`` of samples without a ``job`` label.

    Returns:
        The points and rejections; ``read["metric_point"]`` counts sample lines.

    Raises:
        MalformedInput: not text, or a line the parser cannot read (the message names the
            line number and shows the line).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedInput(f"not UTF-8 text: {exc}") from None
    declared_counters = {
        match.group(1)
        for match in map(_TYPE_LINE.match, text.split("\n"))
        if match is not None and match.group(2) == "counter"
    }
    lines = _Lines(text)
    try:
        # The parser only iterates over its argument: any iterable of lines will do.
        families = list(text_fd_to_metric_families(cast("TextIO", lines)))
    except (ValueError, IndexError, KeyError) as exc:
        detail = f": {exc}" if str(exc) else ""
        raise MalformedInput(
            f"line {lines.number}: not Prometheus text exposition format{detail}: "
            f"{lines.current()[:120]!r}"
        ) from None
    out = Decoded()
    for family in families:
        samples = list(family.samples)
        if family.type == "counter" and family.name in declared_counters:
            # The parser renames a counter's samples to ``<name>_total``; keep them as
            # written when the family was declared without the suffix.
            samples = [s._replace(name=family.name) for s in samples]
        out.count_read("metric_point", len(samples))
        if family.type == "histogram":
            _histograms(
                out, family.name, family.documentation, samples, scrape_unix_nano, service_name
            )
            continue
        for sample in samples:
            point = _point(
                family.type,
                family.name,
                family.documentation,
                sample,
                scrape_unix_nano,
                service_name,
            )
            if point is None:
                out.reject("metric_point", BAD_TIME, f"{sample.name}{_labels_text(sample.labels)}")
            else:
                out.batch.metrics.append(point)
    return out


def _labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _service(labels: dict[str, str], default: str) -> str:
    job = labels.get("job")
    return job if job else default


def _point(
    family_type: str,
    family_name: str,
    description: str,
    sample: Sample,
    scrape_unix_nano: int,
    service_name: str,
) -> MetricPoint | None:
    time = _sample_time(sample, scrape_unix_nano)
    if not is_sane_time(time):
        return None
    attributes: Attributes = dict(sample.labels)
    is_sum = family_type == "counter" or (
        family_type == "summary" and sample.name in (family_name + "_sum", family_name + "_count")
    )
    return MetricPoint(
        name=sample.name,
        type="sum" if is_sum else "gauge",
        time_unix_nano=time,
        description=description,
        service_name=_service(sample.labels, service_name),
        attributes=attributes,
        value=float(sample.value),
        is_monotonic=is_sum,
        temporality="cumulative" if is_sum else "unspecified",
    )


def _histograms(
    out: Decoded,
    name: str,
    description: str,
    samples: list[Sample],
    scrape_unix_nano: int,
    service_name: str,
) -> None:
    buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    counts: dict[tuple[tuple[str, str], ...], float] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    times: dict[tuple[tuple[str, str], ...], int] = {}
    labels_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    bad_bounds: set[tuple[tuple[str, str], ...]] = set()
    for sample in samples:
        key = _label_key(sample.labels, drop="le")
        labels_of.setdefault(key, {k: v for k, v in sample.labels.items() if k != "le"})
        times.setdefault(key, _sample_time(sample, scrape_unix_nano))
        if sample.name == name + "_bucket":
            try:
                bound = float(sample.labels.get("le", "+Inf"))
            except ValueError:
                bad_bounds.add(key)
                continue
            buckets.setdefault(key, []).append((bound, float(sample.value)))
        elif sample.name == name + "_count":
            counts[key] = float(sample.value)
        elif sample.name == name + "_sum":
            sums[key] = float(sample.value)
    for key, labels in labels_of.items():
        where = f"{name}{_labels_text(labels)}"
        if key in bad_bounds:
            out.reject("metric_point", BAD_BOUND, where)
            continue
        if key not in counts:
            out.reject("metric_point", NO_COUNT, where)
            continue
        if not buckets.get(key):
            out.reject("metric_point", NO_BUCKETS, where)
            continue
        if not is_sane_time(times[key]):
            out.reject("metric_point", BAD_TIME, where)
            continue
        total = int(counts[key])
        ordered = sorted(buckets[key])
        bounds = [b for b, _ in ordered if not math.isinf(b)]
        per_bucket: list[int] = []
        previous = 0.0
        for bound, cumulative in ordered:
            if math.isinf(bound):
                break
            per_bucket.append(max(int(cumulative - previous), 0))
            previous = cumulative
        per_bucket.append(max(total - int(previous), 0))
        out.batch.metrics.append(
            MetricPoint(
                name=name,
                type="histogram",
                time_unix_nano=times[key],
                description=description,
                service_name=_service(labels, service_name),
                attributes=dict(labels),
                histogram=HistogramValue(
                    count=total,
                    sum=sums.get(key),
                    bucket_counts=per_bucket,
                    explicit_bounds=bounds,
                ),
                temporality="cumulative",
            )
        )
