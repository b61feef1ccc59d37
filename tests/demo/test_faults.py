"""The shipped fault list says one time per fault (issue 21: it said 13:14:43 and 13:15:43).

Upstream's ``2023-01-30-fault_list.json`` gives each fault twice, as ``inject_timestamp`` and as
``inject_time`` text; for four faults they disagree by one minute. The traces follow the
timestamp (the network delay on ts-travel-service shows from 13:14:54, before the text's
13:15:43), so ``time_unix_nano`` keeps it, ``recorded_time`` shows it, and the upstream text is
kept beside it only with a ``note`` naming the disagreement.
"""

import json
from datetime import UTC, datetime

from coremetry.demo.manifest import read_data_file, read_manifest


def shipped_faults() -> list[dict[str, object]]:
    (nezha,) = [d for d in read_manifest().datasets if d.faults]
    faults = json.loads(read_data_file(nezha.faults))["faults"]
    assert isinstance(faults, list)
    return faults


def test_each_fault_has_one_time_and_a_note_where_upstream_text_differs() -> None:
    faults = shipped_faults()
    assert len(faults) == 17
    noted = []
    for fault in faults:
        kept = datetime.fromtimestamp(int(str(fault["time_unix_nano"])) // 10**9, tz=UTC)
        assert fault["recorded_time"] == kept.strftime("%Y-%m-%dT%H:%M:%SZ"), fault
        if fault["inject_time"] != kept.strftime("%Y-%m-%d %H:%M:%S"):
            note = str(fault["note"])
            assert str(fault["inject_time"])[11:] in note, fault
            assert f"{kept:%H:%M:%S}" in note, fault
            noted.append((fault["service.name"], fault["recorded_time"]))
        else:
            assert "note" not in fault, fault
    assert noted == [
        ("ts-basic-service", "2023-01-30T12:07:12Z"),
        ("ts-basic-service", "2023-01-30T12:14:56Z"),
        ("ts-travel-service", "2023-01-30T13:14:43Z"),
        ("ts-preserve-service", "2023-01-30T13:29:52Z"),
    ]


def test_travel_has_three_faults_the_walkthrough_names() -> None:
    travel = [
        (f["type"], f["recorded_time"])
        for f in shipped_faults()
        if f["service.name"] == "ts-travel-service"
    ]
    assert travel == [
        ("cpu_contention", "2023-01-30T13:06:49Z"),
        ("network_delay", "2023-01-30T13:14:43Z"),
        ("network_delay", "2023-01-30T13:22:22Z"),
    ]
