"""The report's rows without a pipeline run: which peak each model's MFU and "time x
peak" used, where it came from, and what the model ran on."""

from __future__ import annotations

import dataclasses
import re

import pytest

from stages.evaluate.artifact import DecodeScores, EvalSummary
from stages.report.records import model_record
from stages.train.artifact import TrainSummary
from stages.report.tables import display_table, hardware_lines, markdown
from tests.helpers import comparison_of, group_summary, paired_test, system_interval

CONFIG = {"model": {"family": "transformer", "preset": "small"},
          "train": {"workers": 2, "peak_flops_per_worker": None}}
TRAIN = {"parameters": 7_580_000, "non_embedding_parameters": 5_530_000, "steps": 100, "stop_reason": "max_steps",
         "train_tokens": 100_000, "train_seconds": 100.0, "device_hours": 200 / 3600, "train_flops": 4e12,
         "train_flops_6nd": 5e12, "flops_per_second": 4e10, "mfu": 4e10 / (2 * 8e10)}
MEASURED = {"precision": "fp32", "device_name": "AMD EPYC", "device_capability": "AVX2", "threads_per_worker": 1,
            "peak_flops_per_worker": 8e10, "peak_source": "measured",
            "peak_detail": "fp32 matmul probe, AMD EPYC, 1 thread"}

SCORES = {"bleu": 20.0, "bleu_lc": 20.0, "bleu_lc_signature": "", "chrf": 40.0, "bleu_signature": "",
          "chrf_signature": "", "mean_score": -1.0, "decode_seconds": 1.0, "sentences_per_second": 1.0,
          "tokens_per_second": 1.0}

SOURCES = {"train_source": "train artifact", "eval_source": "evaluate artifact"}


def trained(**fields) -> TrainSummary:
    return TrainSummary(**{**TRAIN, **fields})


def evaluated(precision: str | None = None, device_name: str | None = None, **scores) -> EvalSummary:
    return EvalSummary(split="test", sentences=3, beam_size=4, length_penalty=0.6, decode_wall_seconds=1.0,
                       precision=precision, device_name=device_name, beam=DecodeScores(**{**SCORES, **scores}))


def test_a_row_uses_the_peak_the_run_measured_and_says_so():
    record = model_record("t", CONFIG, trained(**MEASURED), evaluated("fp32", "AMD EPYC"))
    assert record["train_flops_paper"] == pytest.approx(100.0 * 2 * 8e10)
    assert (record["peak_source"], record["precision"], record["eval_precision"]) == ("measured", "fp32", "fp32")
    cells = display_table([record]).iloc[0]
    assert cells["precision"] == "fp32" and cells["peak GFLOP/s"] == "80.0" and cells["peak from"] == "measured"
    assert cells["MFU"] == "25.0%"
    lines = hardware_lines([record])
    assert lines == ["t: trained in fp32 on AMD EPYC (AVX2, 1 thread(s) per worker), decoded in fp32",
                     "t: peak 80.0 GFLOP/s per worker, measured: fp32 matmul probe, AMD EPYC, 1 thread"]
    assert all(line in markdown([record], "title", []) for line in lines)


def test_an_artifact_made_before_peaks_were_measured_falls_back_to_the_configs_peak():
    old_config = {**CONFIG, "train": {"workers": 2, "peak_flops_per_worker": 1.64e11}}
    record = model_record("old", old_config, trained(), None)
    assert record["peak_flops_per_worker"] == 1.64e11 and record["peak_source"] == "config"
    assert record["train_flops_paper"] == pytest.approx(100.0 * 2 * 1.64e11)
    assert record["precision"] is None and display_table([record]).iloc[0]["precision"] == "-"
    assert hardware_lines([record]) == ["old: peak 164.0 GFLOP/s per worker, config: train.peak_flops_per_worker"]


def test_no_peak_at_all_leaves_the_columns_empty():
    record = model_record("bare", CONFIG, trained(mfu=None), None)
    assert record["train_flops_paper"] is None and record["peak_source"] is None
    assert hardware_lines([record]) == []


def test_the_curve_keeps_loss_and_bleu_points_and_the_report_plots_bleu_beside_the_loss(tmp_path):
    from stages.report.plots import BLEU_CURVES, LOSS_VS_FLOPS, write_plots
    from stages.report.records import validation_curve

    rows = [{"step": 10, "train_loss": 5.0, "train_flops": 1e12, "train_seconds": 5.0},
            {"step": 10, "valid_loss": 4.0, "train_flops": 1e12, "train_seconds": 5.0},
            {"step": 20, "valid_loss": 3.5, "train_flops": 2e12, "train_seconds": 9.0},
            {"step": 20, "valid_bleu": 12.5, "valid_chrf": 40.0, "train_bleu": 15.0, "train_chrf": 45.0,
             "bleu_decode_seconds": 3.0, "train_flops": 2e12, "train_seconds": 9.0}]
    curve = validation_curve(rows)
    assert [point["step"] for point in curve] == [10, 20, 20]  # no training-loss row
    assert curve[2] == {"step": 20, "train_flops": 2e12, "train_seconds": 9.0, "valid_bleu": 12.5,
                        "valid_chrf": 40.0, "train_bleu": 15.0, "train_chrf": 45.0}
    record = model_record("t", CONFIG, trained(best_valid_bleu=12.5), evaluated(bleu=11.0, bleu_lc=12.0))
    assert display_table([record]).iloc[0][["valid BLEU", "BLEU beam", "BLEU lc beam"]].tolist() == \
        ["12.50", "11.00", "12.00"]
    written = write_plots([record], {"t": curve}, tmp_path, "title")
    assert BLEU_CURVES in written and LOSS_VS_FLOPS in written
    assert (tmp_path / BLEU_CURVES).read_bytes().startswith(b"\x89PNG")
    # Without BLEU points there is no BLEU figure.
    (tmp_path / "loss_only").mkdir()
    assert BLEU_CURVES not in write_plots([record], {"t": curve[:2]}, tmp_path / "loss_only", "title")


def test_a_run_that_ended_inside_its_warmup_or_did_not_learn_is_warned_of_in_the_report():
    from stages.report.artifact import ReportFile, summary
    from stages.report.records import from_reports

    falling = [{"step": 50, "train_loss": 9.0}, {"step": 100, "train_loss": 6.0}]
    flat = [{"step": 50, "train_loss": 9.0}, {"step": 100, "train_loss": 8.9}]
    inside = {**CONFIG, "train": {**CONFIG["train"], "warmup_steps": 4000}}
    warned, _ = from_reports("short", {"config": inside, "metrics": TRAIN}, flat, None, **SOURCES)
    assert warned["training_warnings"] == [
        "short ended at update 100, inside its warmup of 4,000 updates: its learning rate never reached its peak "
        "(lower train.warmup_steps, or set train.warmup_fraction)",
        "short's training loss did not fall: 9.00 at update 50, 8.90 at update 100"]
    assert all(f"**Warning:** {line}" in markdown([warned], "title", []) for line in warned["training_warnings"])
    _, lines = summary(ReportFile(title="t", fields=[], models=[warned], curves={}, comparison=None))
    assert lines[:2] == [f"warning: {line}" for line in warned["training_warnings"]]
    # Past its warmup and learning; or a warmup given as a fraction of the run: nothing.
    past = {**CONFIG, "train": {**CONFIG["train"], "warmup_steps": 40}}
    record, _ = from_reports("ok", {"config": past, "metrics": TRAIN}, falling, None, **SOURCES)
    assert record["training_warnings"] == []
    fraction = {**CONFIG, "train": {**CONFIG["train"], "warmup_steps": 4000, "warmup_fraction": 0.1}}
    record, _ = from_reports("ok", {"config": fraction, "metrics": TRAIN}, falling, None, **SOURCES)
    assert record["training_warnings"] == []


def test_the_console_summary_fits_100_columns_without_cutting_a_cell():
    """Eight runs with long names (two seeds of four models at two budgets), intervals,
    verdicts, warnings: rendered at 100 columns, every cell is whole."""
    from rich.console import Console

    from pipeline.commands import output
    from stages.report.artifact import ReportFile

    records, groups, intervals = [], [], {}
    for model in ("transformer_tiny", "decoder_only_tiny"):
        for budget in (2e12, 4e12):
            label = f"{model}.{budget:.0e}".replace("e+", "e")
            groups.append(group_summary(label, 12.345, model=model, budget=budget, seeds=[1, 2]))
            intervals[label] = {"BLEU": system_interval(12.345, 10.111, 14.579)}
            for seed in (1, 2):
                record = model_record(f"{label}.s{seed}", CONFIG, trained(**MEASURED), evaluated(bleu=12.3, chrf=40.1))
                records.append(dataclasses.replace(record, model=model, budget=budget))
    tests = [paired_test(a="transformer_tiny.2e12", b="decoder_only_tiny.2e12", delta=1.5, delta_low=-0.5,
                         delta_high=3.5, p_holm=0.21, significant=False)]
    report = ReportFile(title="a long experiment name", fields=[], models=records, curves={},
                        comparison=comparison_of(groups=groups, intervals=intervals, tests=tests))
    console = Console(width=100, record=True)
    original = output.table_console
    output.table_console = lambda: console
    try:
        output.print_report(report)
    finally:
        output.table_console = original
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 100, text
    # The answer, as report.md opens: each budget's models ranked, every cell on one line.
    assert re.search(r"│ 4e12 +│ 2 +│ decoder_only_tiny +│ 12.35 \[10.11, 14.58\] +│", text), text
    assert "-1.50 [-3.50, +0.50]" in text
    assert "decoder_only_tiny.2e12 - transformer_tiny.2e12: +1.50 BLEU [-0.50, +3.50], Holm p 0.2100: not significant" \
        in " ".join(text.split())  # a line of prose may wrap; a cell may not
    assert text.count("trained in fp32 on AMD EPYC") == 1  # the hardware once


def test_a_run_record_refuses_a_name_that_is_not_its_field():
    """The report reads a record by field name; a renamed field is an error at once, not
    an empty cell."""
    from pipeline.core.records import RecordError
    from stages.report.records import RunRecord, load_record

    record = model_record("t", CONFIG, trained(**MEASURED), evaluated("fp32", "AMD EPYC"))
    assert record["bleu"] == 20.0 and record.get("ctranslate2_bleu") is None
    for read in (lambda: record["bleu_score"], lambda: record.get("bleu_score"),
                 lambda: record.update({"bleu_score": 1.0})):
        with pytest.raises(KeyError, match="RunRecord has no field 'bleu_score'"):
            read()
    written = record.to_json()
    assert list(written)[:3] == ["name", "model", "seed"] and "top_output" not in written  # empty: left out
    assert load_record(written, "report.json") == record
    with pytest.raises(RecordError, match="report.json: RunRecord has no field 'bleu_score'"):
        load_record({**written, "bleu_score": 1.0}, "report.json")
    assert RunRecord(name="x").training_warnings == []
