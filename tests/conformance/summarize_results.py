"""Summarize a conformance results dir (one sub-dir per scenario, each with checks.json).

Usage: python summarize_results.py <results-dir>
Prints per-scenario SUCCESS/FAILURE/WARNING counts and every non-success check with its message.
Called by ``run-conformance.sh`` after each run (the project's copy of the team's script).
"""

import collections
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
totals: collections.Counter[str] = collections.Counter()
for checks_file in sorted(root.glob("*/checks.json")):
    scenario = checks_file.parent.name.rsplit("-20", 1)[0]  # strip timestamp suffix
    checks = json.loads(checks_file.read_text())
    counts = collections.Counter(c["status"] for c in checks)
    totals.update(counts)
    flag = "FAIL" if counts.get("FAILURE") else "ok  "
    print(f"{flag} {scenario}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    for c in checks:
        if c["status"] in ("FAILURE", "WARNING"):
            print(f"       {c['status']} {c['id']}: {(c.get('errorMessage') or '')[:240]}")
print("TOTAL", dict(totals))
