"""What the orchestration reads of the report stage: a report artifact and its summary
table (``nmt run`` and ``nmt report`` print it), and the report's row for one model from
its train and evaluate reports, with the evaluation's outputs the tests score (``nmt
report`` across experiments)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.records import load
from stages.report.comparison_records import Comparison
from stages.report.records import RunRecord

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


@dataclass(kw_only=True)
class ReportFile:
    """report.json as ``tables.write_json`` writes it."""

    title: str
    fields: list[str]  # report.csv's columns
    models: list[RunRecord]  # one row per run
    curves: dict[str, list[dict]]  # run name -> its validation points
    comparison: Comparison | None


def parse_report(text: str | bytes, source: str = REPORT_JSON) -> ReportFile:
    """``RecordError`` naming ``source`` and the path to a field this code does not know
    or needs and does not find."""
    return load(ReportFile, json.loads(text), source)


def read_report(artifact: Path) -> ReportFile:
    return parse_report((artifact / REPORT_JSON).read_text(), str(artifact / REPORT_JSON))


def summary(report: ReportFile) -> tuple[pd.DataFrame, list[str]]:
    """What a console shows of a report, narrow enough for 100 columns: the report's
    answer where it has one (each budget's models ranked, as report.md opens), else one
    row per compared model (a model's seeds together): parameters, counted training
    FLOPs, BLEU with its 95% interval, chrF, whether it translates; then the lines under
    it: runs that did not really train or do not translate, the models withheld from
    comparisons, the primary comparisons' verdicts, sacreBLEU's signature and the
    hardware, each once. Every run's row is the appendix's (appendix.md)."""
    import pandas as pd

    from stages.report.comparison_tables import answer, count, gate_sentences
    from stages.report.tables import signature_lines, warning_lines

    models, comparison = report.models, report.comparison
    ranked = comparison and answer(comparison)
    rows = []
    if not ranked:
        intervals = comparison.intervals if comparison else {}
        # A model's seeds together, as the comparison grouped them; without one, each run alone.
        groups: list[tuple[str, str | None, list[RunRecord]]] = [(group.label, group.translates,
                   [record for record in models if record.model == group.model
                    and record.budget == group.budget] or
                   [record for record in models if record.name == group.label])
                  for group in (comparison.groups if comparison else [])] or \
            [(record.name, record.translates, [record]) for record in models]
        for label, translates, members in groups:
            parameters = members[0].parameters if members else None
            bleu = intervals.get(label, {}).get("BLEU")
            score = f"{bleu.score:.2f} [{bleu.low:.2f}, {bleu.high:.2f}]" if bleu else _mean(members, "bleu")
            flops = _mean_value(members, "train_flops")
            rows.append([label, str(len(members)), "-" if parameters is None else count(parameters),
                         "-" if flops is None else f"{flops:.2e}", score, _mean(members, "chrf"), translates or "-"])
    # The answer without its seeds column, "#" for rank: 100 columns hold it with 17-character names.
    frame = ranked.table.drop(columns="seeds").rename(columns={"rank": "#"}) if ranked else pd.DataFrame(
        rows, columns=["model", "runs", "params", "FLOPs", "BLEU [95%]", "chrF", "translates"])
    judged = (gate_sentences(comparison) + _verdict_lines(comparison) + (comparison.unpaired or [])
              if comparison else [])
    return frame, ([f"warning: {line}" for line in warning_lines(models)] + judged
                   + [f"sacreBLEU {line}" for line in signature_lines(models)] + _hardware_once(models))


def _verdict_lines(comparison: Comparison) -> list[str]:
    """Each primary BLEU comparison: the difference, its interval and the verdict, or
    why there is none (too few seeds)."""
    from stages.report.significance import shown_p, verdict

    lines = []
    for test in comparison.tests:
        if test.role != "primary" or test.metric != "BLEU":
            continue
        held = f", Holm p {shown_p(test.p_holm)}" if test.p_holm is not None else ""
        lines.append(f"{test.b} - {test.a}: {test.delta:+.2f} BLEU [{test.delta_low:+.2f}, "
                     f"{test.delta_high:+.2f}]{held}: {verdict(test)}")
    return lines


def _hardware_once(models: list[RunRecord]) -> list[str]:
    """Each distinct "trained in ... on ..." description once, naming its runs only when
    the runs differ."""
    from stages.report.tables import trained_on

    described: dict[str, list[str]] = {}
    for record in models:
        if record.device_name:
            described.setdefault(trained_on(record), []).append(record.name)
    if len(described) == 1:
        return [f"every run {next(iter(described))}"]
    return [f"{', '.join(names)}: {text}" for text, names in described.items()]


def _mean_value(records: list[RunRecord], field: str) -> float | None:
    values = [record[field] for record in records if record.get(field) is not None]
    return sum(values) / len(values) if values else None


def _mean(records: list[RunRecord], field: str) -> str:
    value = _mean_value(records, field)
    return "-" if value is None else f"{value:.2f}"


def model_row(name: str, train_report: dict, train_curve: list[dict], eval_report: dict | None,
              run_of: str | None = None, *, train_source: str, eval_source: str) -> tuple[RunRecord, list[dict]]:
    """One model's row of the report and its validation curve, from any dicts with a
    stage's ``config`` and ``metrics`` (a manifest, or the copy MLflow keeps); the
    sources name them in an error (``stages/report/records.py``)."""
    from stages.report.records import from_reports

    return from_reports(name, train_report, train_curve, eval_report, run_of, train_source=train_source,
                        eval_source=eval_source)
