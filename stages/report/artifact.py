"""What the orchestration reads of the report stage: a report artifact and its summary
table (``nmt run`` and ``nmt report`` print it), and the report's row for one model from
its train and evaluate reports, with the evaluation's outputs the tests score (``nmt
report`` across experiments)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

REPORT_JSON = "report.json"  # the rows, the curves and the title (tables.write_json)
# An evaluation's files the intervals and tests score: its beam outputs and the references.
OUTPUT_FILES = ("hypotheses.txt", "reference.txt")


def sentence_lines(text: str) -> list[str]:
    """One sentence per "\n"-ended line (evaluate writes them so); not splitlines, which
    would also cut at the Unicode line separators a sentence may hold."""
    return text[:-1].split("\n") if text else []


def evaluation_outputs(files: dict[str, bytes]) -> tuple[list[str], list[str]] | None:
    """(hypotheses, references) from an evaluation's ``OUTPUT_FILES``; None if one is
    missing."""
    if not all(name in files for name in OUTPUT_FILES):
        return None
    hypotheses, references = (sentence_lines(files[name].decode("utf-8")) for name in OUTPUT_FILES)
    return hypotheses, references


def parse_report(text: str | bytes) -> dict:
    return json.loads(text)


def read_report(artifact: Path) -> dict:
    return parse_report((artifact / REPORT_JSON).read_text())


def summary(report: dict) -> tuple[pd.DataFrame, list[str]]:
    """The report's summary columns, one row per model as display strings, and the lines
    printed under them: runs that did not really train, sacreBLEU's signatures, then each
    run's hardware."""
    from stages.report.tables import SUMMARY_COLUMNS, display_table, hardware_lines, signature_lines, warning_lines

    frame = display_table(report["models"])[list(SUMMARY_COLUMNS)]
    return frame, ([f"warning: {line}" for line in warning_lines(report["models"])]
                   + [f"sacreBLEU {line}" for line in signature_lines(report["models"])]
                   + hardware_lines(report["models"]))


def model_row(name: str, train_report: dict, train_curve: list[dict], eval_report: dict | None,
              run_of: str | None = None) -> tuple[dict, list[dict]]:
    """One model's row of the report and its validation curve, from any dicts with a
    stage's ``config`` and ``metrics`` (a manifest, or the copy MLflow keeps)."""
    from stages.report.records import from_reports

    return from_reports(name, train_report, train_curve, eval_report, run_of)
