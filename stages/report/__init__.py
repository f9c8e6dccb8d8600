"""report: every model of the experiment side by side, the classic comparison table.

One row per model (``records.FIELDS``): parameters, training tokens, time and
device-hours, training FLOPs counted three ways, achieved FLOP/s and MFU, best valid
perplexity, BLEU and chrF greedy and with the beam, decoding speed. Written as
``report.md``, ``report.html``, ``report.csv`` and ``report.json`` (which also holds
each model's validation curve), with PNG plots: BLEU against training FLOPs, and
validation loss against training FLOPs and against wall time. ``nmt report`` writes
the same files for models gathered from several configs or MLflow runs.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.context import StageContext
from stages.names import EVALUATE, TRAIN, evaluate_stage, train_stage
from stages.report import records
from stages.report.config import ReportStageConfig

# 4: lowercased BLEU and best valid BLEU columns, BLEU curves during training
VERSION = 4
# The files of each upstream artifact a record reads (besides its manifest): never
# the train stage's checkpoints.
READS = {TRAIN: ("metrics.jsonl",), EVALUATE: ()}
MLFLOW_FILES = ("report.*", "*.png")


def run(inputs: dict[str, Path], config: ReportStageConfig, output: Path, ctx: StageContext) -> dict:
    rows, curves = [], {}
    for name in config.models:
        record, curve = records.from_artifacts(name, inputs[train_stage(name)], inputs.get(evaluate_stage(name)))
        rows.append(record)
        curves[name] = curve
    write_report(rows, curves, output, config.experiment)
    return {"models": len(rows)}


def write_report(rows: list[dict], curves: dict[str, list[dict]], output: Path, title: str) -> list[Path]:
    """The report's files in ``output``; any subset of models renders."""
    # Imported here: pandas and matplotlib load only when a report is written.
    from stages.report import tables
    from stages.report.plots import write_plots

    output.mkdir(parents=True, exist_ok=True)
    plots = write_plots(rows, curves, output, title)
    tables.write_json(rows, curves, output / "report.json", title)
    tables.write_csv(rows, output / "report.csv")
    (output / "report.md").write_text(tables.markdown(rows, title, plots), encoding="utf-8")
    (output / "report.html").write_text(tables.html_page(rows, title, plots), encoding="utf-8")
    return [output / name for name in ("report.md", "report.html", "report.csv", "report.json", *plots)]
