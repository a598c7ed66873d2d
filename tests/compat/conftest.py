"""The compatibility suite's line in the test summary: how many programs run unchanged."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from harness import edits, programs  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    reports = [r for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
               if "test_program_matches_torch" in r.nodeid and r.when == "call"]
    if not reports:
        return
    passed = {r.nodeid for r in reports if r.passed}
    paths = programs()
    unchanged = [p for p in paths if edits(p) == 0 and any(f"[{p.stem}]" in n for n in passed)]
    terminalreporter.write_line(
        f"PyTorch compatibility suite: {len(passed)} of {len(reports)} programs print torch's numbers; "
        f"{len(unchanged)} of {len(paths)} run unchanged (no edited line)")
