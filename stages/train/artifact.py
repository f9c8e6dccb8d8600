"""Readers of a train artifact's small files, for other modules (the report, ``nmt
report``, ``nmt run``): torch-free, so that reading a curve does not import a trainer.
The weights are read through ``stages.shared.inference.model_file``."""

from __future__ import annotations

import json
from pathlib import Path

CURVE_FILE = "metrics.jsonl"  # every logged row: training, validation loss, validation BLEU
REPORT_FILE = "train_report.json"  # totals, costs and the resolved hardware


def parse_curve(text: str) -> list[dict]:
    """The rows of a ``metrics.jsonl``, in the order they were logged."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_curve(artifact: Path) -> list[dict]:
    return parse_curve((artifact / CURVE_FILE).read_text())
