"""Readers of a report artifact, for other modules (``nmt run`` and ``nmt report``
print its table)."""

from __future__ import annotations

import json
from pathlib import Path

REPORT_JSON = "report.json"  # the rows, the curves and the title (tables.write_json)


def parse_report(text: str | bytes) -> dict:
    return json.loads(text)


def read_report(artifact: Path) -> dict:
    return parse_report((artifact / REPORT_JSON).read_text())
