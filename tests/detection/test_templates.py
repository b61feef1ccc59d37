"""The Drain-style template miner on real logs (loghub's parser ground truth), and new
templates as anomalies on synthetic ones."""

from __future__ import annotations

import csv
from collections import defaultdict
from typing import Final

import pytest
from conftest import SHARED

from coremetry.detection import DetectorConfig
from coremetry.detection.templates import TemplateMiner, mask, new_template_anomalies

LOGHUB: Final = SHARED / "data" / "loghub"
MINUTE: Final = 60 * 1_000_000_000
T0: Final = 1_700_000_000 * 1_000_000_000


def grouping_accuracy(system: str) -> tuple[float, int]:
    """Zhu et al.'s grouping accuracy ("Tools and Benchmarks for Automated Log Parsing", ICSE
    SEIP 2019): the share of lines whose mined group is exactly their ground-truth group."""
    path = LOGHUB / system / f"{system}_2k.log_structured.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    miner = TemplateMiner()
    mined = [miner.add(row["Content"]).template_id for row in rows]
    truth = [row["EventId"] for row in rows]
    by_mined: dict[int, set[int]] = defaultdict(set)
    by_truth: dict[str, set[int]] = defaultdict(set)
    for line, (a, b) in enumerate(zip(mined, truth, strict=True)):
        by_mined[a].add(line)
        by_truth[b].add(line)
    right = sum(1 for line in range(len(rows)) if by_mined[mined[line]] == by_truth[truth[line]])
    return right / len(rows), len(miner.templates)


# Drain's own figures in that benchmark: HDFS 0.998, OpenSSH 0.788, BGL 0.963; ours measured
# 0.998, 0.787, 0.960 with the defaults (depth 2, similarity 0.5).
@pytest.mark.parametrize(
    ("system", "at_least", "templates"),
    [("HDFS", 0.99, (14, 20)), ("OpenSSH", 0.75, (20, 40)), ("BGL", 0.94, (90, 140))],
)
def test_grouping_accuracy_on_loghub(
    system: str, at_least: float, templates: tuple[int, int]
) -> None:
    accuracy, mined = grouping_accuracy(system)
    assert accuracy >= at_least
    assert templates[0] <= mined <= templates[1]


def test_masking_and_merging() -> None:
    line = "Received block blk_-1608999687919862906 of size 91178 from /10.250.10.6:50010"
    assert mask(line) == ["Received", "block", "<*>", "of", "size", "<*>", "from", "<*>"]
    assert mask("order 3ab91d17-d0c4 failed at deadbeefcafe on web") == [
        "order", "<*>", "failed", "at", "<*>", "on", "web",
    ]  # fmt: skip
    miner = TemplateMiner()
    first = miner.add("login failed for alice from web")
    second = miner.add("login failed for bob from web")
    other = miner.add("disk full on /var")
    assert first is second
    assert first.text == "login failed for <*> from web"
    assert first.count == 2
    assert other.template_id == 2
    with pytest.raises(ValueError, match="similarity"):
        TemplateMiner(similarity=0)


def test_a_new_error_template_with_enough_evidence_is_an_anomaly() -> None:
    config = DetectorConfig(min_history_points=10)
    usual = [("api", T0 + m * MINUTE, f"WARN slow call to cache took {m} ms") for m in range(30)]
    new = [
        ("api", T0 + 30 * MINUTE, "ERROR connection refused by payments:8443"),
        ("api", T0 + 31 * MINUTE + 5, "ERROR connection refused by payments:8443"),
    ]
    lone = [("api", T0 + 40 * MINUTE, "ERROR checksum mismatch in segment 12")]
    early = [
        ("db", T0 + 2 * MINUTE, "ERROR replica lag"),
        ("db", T0 + 3 * MINUTE, "ERROR replica lag"),
    ]
    [found] = new_template_anomalies(
        [*usual, *new, *lone, *early],
        {"api": T0, "db": T0},
        step_ns=MINUTE,
        end_unix_nano=T0 + 60 * MINUTE,
        config=config,
    )
    assert found.service_name == "api"
    assert found.labels["log.template"] == "ERROR connection refused by <*>"  # payments:8443
    assert (found.start_unix_nano, found.detected_unix_nano) == (
        T0 + 30 * MINUTE,
        T0 + 31 * MINUTE + 5,
    )
    assert found.signal == "logs"
    assert found.ongoing is False  # last seen 29 minutes before the end
    # The lone checksum line is one record: not enough evidence. db's errors come before it
    # had logged for ten minutes: every template is new then, none is judged.
