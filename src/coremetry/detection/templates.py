"""Log templates: a Drain-style miner, and new templates as anomalies.

**Mining** (:class:`TemplateMiner`), after Drain (He, Zhu, Zheng and Lyu, "Drain: An Online Log
Parsing Approach with Fixed Depth Tree", ICWS 2017), the parser drain3 and the LogPAI
benchmarks use. A log body is split on whitespace and *masked*: a token holding a digit
(numbers, ids, addresses, ``host:port``) or made of 8+ hex digits becomes ``<*>`` (Drain's
"has numbers" rule).
Records are clustered by a fixed-depth prefix tree: first by token count, then by the first
``depth`` tokens (a token that is ``<*>`` goes to the ``<*>`` branch), and in the leaf to the
most similar template: similarity is the share of positions whose tokens are equal (``<*>``
in the template matches anything), and a record joins a template when it reaches
``similarity``; the template then keeps the common tokens and turns the differing positions
into ``<*>``. Otherwise the record starts a new template. Deterministic: the same records in
the same order give the same templates and ids. Bounded: a leaf holds at most
``max_templates_per_leaf`` templates (a record beyond that joins its most similar one).

We write this (~100 lines) rather than depend on ``drain3``: its last release (0.9.11, 2022)
pins ``jsonpickle==1.5.1`` and ``cachetools==4.2.1`` exactly and ships no type information.
Looked at again for issue 16: still so; two exact pins of unrelated packages would constrain
every installation of the server for a parser this small, so the choice stands.

**New templates** (:func:`new_template_anomalies`): per service, over the WARN-and-worse
records of a run, a template is *new* when its first record comes at least
``min_history_points`` buckets after the service's first log record of the run (any
severity: the service must have been logging for a while, or every template would be new), and
it is an anomaly once ``evidence_k`` of its records fall within ``evidence_n`` buckets of that
first one — the detector's minimum-evidence rule, so one odd line is not a problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from .detector import Anomaly, DetectorConfig

__all__ = ["Template", "TemplateMiner", "mask", "new_template_anomalies"]

WILDCARD: Final = "<*>"

_HAS_DIGIT: Final = re.compile(r"\d")
_HEX_ID: Final = re.compile(r"(?:0x)?[0-9a-fA-F]{8,}")


_CONSTANT: set[str] = set()  # tokens known not to be variable (a cache; cleared when large)
_CONSTANT_MAX: Final = 100_000


def mask(body: str) -> list[str]:
    """The body's whitespace-separated tokens, variable ones as ``<*>`` (module docstring)."""
    tokens = body.split()
    for i, token in enumerate(tokens):
        if token in _CONSTANT:
            continue
        if _HAS_DIGIT.search(token) or _HEX_ID.fullmatch(token):
            tokens[i] = WILDCARD
        else:
            if len(_CONSTANT) >= _CONSTANT_MAX:
                _CONSTANT.clear()
            _CONSTANT.add(token)
    return tokens


class Template(msgspec.Struct, kw_only=True):
    """One mined template.

    Attributes:
        template_id: its number in the miner, from 1, in order of creation.
        tokens: the template's tokens, ``<*>`` for variable positions.
        count: records that joined it.
    """

    template_id: int
    tokens: list[str]
    count: int = 0

    @property
    def text(self) -> str:
        """The template as one line."""
        return " ".join(self.tokens)


class TemplateMiner:
    """Drain-style online template miner (see the module docstring).

    Args:
        depth: prefix tokens used to route a record below the token-count level.
        similarity: share of equal positions needed to join a template (0..1).
        max_templates_per_leaf: templates kept per leaf of the prefix tree.

    Raises:
        ValueError: a parameter out of range (named).
    """

    def __init__(
        self, *, depth: int = 2, similarity: float = 0.5, max_templates_per_leaf: int = 100
    ) -> None:
        if depth < 0:
            raise ValueError("depth must not be negative")
        if not 0 < similarity <= 1:
            raise ValueError("similarity must be in (0, 1]")
        if max_templates_per_leaf < 1:
            raise ValueError("max_templates_per_leaf must be at least 1")
        self._depth = depth
        self._similarity = similarity
        self._max = max_templates_per_leaf
        self._leaves: dict[tuple[str, ...], list[Template]] = {}
        self.templates: list[Template] = []

    def add(self, body: str) -> Template:
        """Mine one record's body; return the template it joined or started."""
        tokens = mask(body)
        key = (str(len(tokens)), *(tokens[: self._depth]))
        leaf = self._leaves.setdefault(key, [])
        best: Template | None = None
        best_score = -1.0
        for template in leaf:
            score = _similarity(template.tokens, tokens)
            if score > best_score:
                best, best_score = template, score
        if best is None or (best_score < self._similarity and len(leaf) < self._max):
            best = Template(template_id=len(self.templates) + 1, tokens=tokens)
            leaf.append(best)
            self.templates.append(best)
        elif best_score < 1.0:  # at 1 every position already matches: nothing to merge
            best.tokens = [
                a if a in (b, WILDCARD) else WILDCARD
                for a, b in zip(best.tokens, tokens, strict=True)
            ]
        best.count += 1
        return best


def _similarity(template: list[str], tokens: list[str]) -> float:
    if not tokens:
        return 1.0
    equal = sum(1 for a, b in zip(template, tokens, strict=True) if a in (b, WILDCARD))
    return equal / len(tokens)


def new_template_anomalies(
    records: Iterable[tuple[str, int, str]],
    logging_since: Mapping[str, int],
    *,
    step_ns: int,
    end_unix_nano: int,
    config: DetectorConfig,
) -> list[Anomaly]:
    """New log templates per service as anomalies (rules in the module docstring).

    Args:
        records: ``(service_name, time_unix_nano, body)`` of the WARN-and-worse records of
            the run, oldest first.
        logging_since: per service, the start of its first bucket with any log record.
        step_ns: the run's bucket width.
        end_unix_nano: the end of the judged range.
        config: ``min_history_points``, ``evidence_k``, ``evidence_n`` and
            ``close_points`` (an anomaly whose last record is within the last
            ``close_points`` buckets is ``ongoing``).

    Returns:
        One anomaly per new template with enough evidence: series
        ``log.template.new`` of the service, label ``log.template`` (the template text),
        signal ``logs``, baseline 0, observed the most records in one bucket, score the
        number of records (capped at 100), ordered by start.
    """
    miners: dict[str, TemplateMiner] = {}
    first_seen: dict[tuple[str, int], int] = {}
    times: dict[tuple[str, int], list[int]] = {}
    for service, time_unix_nano, body in records:
        miner = miners.setdefault(service, TemplateMiner())
        template = miner.add(body)
        key = (service, template.template_id)
        first_seen.setdefault(key, time_unix_nano)
        times.setdefault(key, []).append(time_unix_nano)
    found: list[Anomaly] = []
    for (service, template_id), first in first_seen.items():
        since = logging_since.get(service)
        if since is None or first < since + config.min_history_points * step_ns:
            continue
        window_end = first + config.evidence_n * step_ns
        early = [t for t in times[(service, template_id)] if t < window_end]
        if len(early) < config.evidence_k:
            continue
        occurrences = times[(service, template_id)]
        per_bucket: dict[int, int] = {}
        for t in occurrences:
            per_bucket[(t - first) // step_ns] = per_bucket.get((t - first) // step_ns, 0) + 1
        template = miners[service].templates[template_id - 1]
        last = max(occurrences)
        found.append(
            Anomaly(
                series_id=f"logs/{service}/template/{template_id}",
                name="log.template.new",
                labels={"service.name": service, "log.template": template.text[:300]},
                service_name=service,
                unit="{record}",
                signal="logs",
                direction="up",
                start_unix_nano=first,
                detected_unix_nano=early[config.evidence_k - 1],
                end_unix_nano=last,
                ongoing=last >= end_unix_nano - config.close_points * step_ns,
                baseline=0.0,
                observed=float(max(per_bucket.values())),
                score=float(min(len(occurrences), 100)),
                points=len(per_bucket),
            )
        )
    found.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    return found
