"""The translation gate (stages/shared/gate.py): a run that does not translate is marked
in every table and kept out of every test, verdict, primary comparison, IsoFLOP profile
and law; a run evaluated before the check existed is said to be unchecked."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stages.report import isoflop, write_report
from stages.report.artifact import read_report, summary
from stages.report.comparison import compare
from stages.report.comparison_records import Spread
from stages.report.comparison_tables import gate_sentences
from stages.shared import gate
from tests.unit.stages.report.test_comparison import REFERENCES, output, run
from tests.unit.stages.report.test_compute_laws import records as law_records
from tests.unit.stages.report.test_isoflop import profile_groups


def judged(record: dict) -> dict:
    record["translates"], record["gate_reasons"] = gate.judge(record)
    return record


def test_a_run_translates_only_with_source_use_and_varied_outputs():
    assert gate.judge({"source_use": 1.2, "top_output_share": 0.01}) == (gate.TRANSLATES, [])
    verdict, reasons = gate.judge({"source_use": 0.04, "top_output_share": 0.01})
    assert verdict == gate.DOES_NOT and reasons == ["its source use is 0.040 nats per target token (at least 0.25 "
                                                    "needed)"]
    verdict, reasons = gate.judge({"source_use": 1.2, "top_output_share": 0.6, "top_output": "Ein Mann ."})
    assert verdict == gate.DOES_NOT and reasons == ['60% of its test outputs are one line ("Ein Mann ."; at most '
                                                    '10% allowed)']
    # At the thresholds themselves, a run passes.
    assert gate.judge({"source_use": gate.SOURCE_USE_MIN, "top_output_share": gate.TOP_OUTPUT_MAX})[0] == "yes"
    # Evaluated before source use was measured: not checked, unless its outputs already fail.
    assert gate.judge({"source_use": None, "top_output_share": 0.02})[0] == gate.NOT_CHECKED
    assert gate.judge({"source_use": None, "top_output_share": 0.5})[0] == gate.DOES_NOT


def test_a_run_within_two_standard_errors_of_the_threshold_is_undecided():
    near = {"source_use": 0.240, "source_use_error": 0.006, "top_output_share": 0.01}
    verdict, reasons = gate.judge(near)
    assert verdict == gate.UNDECIDED and not gate.ranked(verdict)
    assert reasons == ["its source use, 0.240 ± 0.006 nats per target token (standard error), is within 2 standard "
                       "errors of the 0.25 needed"]
    assert gate.judge({**near, "source_use": 0.251})[0] == gate.UNDECIDED  # above it, as near
    # Two standard errors away, on either side, the side decides.
    assert gate.judge({**near, "source_use": 0.263})[0] == gate.TRANSLATES
    assert gate.judge({**near, "source_use": 0.237})[0] == gate.DOES_NOT
    # A collapse is counted on the outputs themselves: it decides however near the source use is.
    assert gate.judge({**near, "top_output_share": 0.5, "top_output": "x"})[0] == gate.DOES_NOT
    # Without a standard error (evaluated before it was measured), the side decides.
    assert gate.judge({"source_use": 0.251, "top_output_share": 0.01})[0] == gate.TRANSLATES


def test_an_undecided_seed_withholds_its_model_and_the_report_says_why(tmp_path):
    rows, outputs = [], {}
    for family, rate in (("transformer", 0.2), ("rnn", 0.4)):
        for seed in (1, 2, 3):
            record = run(f"{family}_tiny", family, seed, 1e12, 10.0 * (1 - rate) + seed * 0.1)
            near = family == "transformer" and seed == 2
            record.update(source_use=0.245 if near else 1.5, source_use_error=0.01, top_output_share=0.01,
                          top_output="x")
            rows.append(judged(record))
            outputs[record["name"]] = output(rate, seed)
    comparison = compare(rows, outputs)
    assert comparison.tests == [] and [entry["label"] for entry in comparison.withheld] == ["transformer_tiny"]
    assert comparison.withheld[0]["translates"] == gate.UNDECIDED
    (said,) = gate_sentences(comparison)
    assert said.startswith("transformer_tiny: undecided whether it translates at this budget (seed 2: its source "
                           "use, 0.245 ± 0.010") and "it is not ranked" in said


def test_a_model_at_a_budget_translates_when_every_seed_does():
    passing, failing = {"translates": "yes"}, {"translates": "no", "seed": 2, "gate_reasons": ["why"]}
    assert gate.group_verdict([passing, passing]) == "yes"
    assert gate.group_verdict([passing, failing]) == "no"
    assert gate.group_verdict([passing, {"translates": "not checked"}]) == "not checked"
    undecided = {"translates": "undecided", "seed": 3, "gate_reasons": ["near"]}
    assert gate.group_verdict([passing, undecided]) == "undecided"
    assert gate.group_verdict([undecided, failing]) == "no"
    assert gate.failing_seeds([passing, failing, undecided]) == "seed 2: why; seed 3: near"
    assert gate.failing_seeds([passing, failing]) == "seed 2: why"


@pytest.fixture()
def sweep():
    """Two families, three seeds each, at three budgets, every run translating but the
    RNN's seed 2 at 1e12 (source use 0.05 nats)."""
    rows, outputs = [], {}
    for family, rate in (("transformer", 0.2), ("rnn", 0.4)):
        for budget, quality in ((1e12, 10.0), (4e12, 15.0), (1.6e13, 22.0)):
            for seed in (1, 2, 3):
                record = run(f"{family}_tiny", family, seed, budget, quality * (1 - rate) + seed * 0.1)
                blind = family == "rnn" and budget == 1e12 and seed == 2
                record.update(source_use=0.05 if blind else 1.5, top_output_share=0.01, top_output="x")
                rows.append(judged(record))
                outputs[record["name"]] = output(rate + (1.6e13 - budget) / 1e14, seed)
    return rows, outputs


def test_a_model_that_does_not_translate_is_withheld_from_every_test_at_its_budget(sweep, tmp_path):
    rows, outputs = sweep
    comparison = compare(rows, outputs)
    assert {(test["a"], test["b"]) for test in comparison.tests} == {
        ("transformer_tiny @ 4e12", "rnn_tiny @ 4e12"), ("transformer_tiny @ 1.6e13", "rnn_tiny @ 1.6e13")}
    assert all(test["family_size"] == 2 for test in comparison.tests)  # Holm over the two left
    (withheld,) = comparison.withheld
    assert withheld["label"] == "rnn_tiny @ 1e12" and withheld["why"].startswith("seed 2: its source use is 0.050")
    assert withheld["seeds_translating"] == [1, 3]
    assert "rnn_tiny @ 1e12" in comparison.intervals  # shown, with its interval
    write_report(rows, {}, tmp_path, "gated", outputs)
    markdown = (tmp_path / "report.md").read_text()
    assert "## Does each model translate?" in markdown
    # Seeds 1 and 3 translate, seed 2 does not: no verdict either way, and the report says why.
    assert ("rnn_tiny @ 1e12: undecided, the seeds disagree at this budget (seeds 1 and 3 translate; seed 2: its source "
            "use is 0.050 nats per target token (at least 0.25 needed)): it is not ranked") in markdown
    primary = markdown.split("## Primary comparisons")[1].split("## Secondary")[0]
    assert "rnn_tiny @ 1e12" not in primary
    assert "At 4e12 training FLOPs, " in primary and "At 1.6e13 training FLOPs, " in primary
    assert "**Warning:** rnn_tiny.1e+12.s2 does not translate: its source use is 0.050" in markdown
    report = read_report(tmp_path)  # report.json read back, every field checked
    assert [model.translates for model in report.models].count("no") == 1
    frame, lines = summary(report)
    # The console opens with the answer, as report.md does: the withheld model listed, not ranked.
    listed = {(row["budget"], row["model"]): row for row in frame.to_dict("records")}
    assert listed[("1e12", "rnn_tiny")]["#"] == "-"
    assert listed[("1e12", "rnn_tiny")]["verdict"] == "not ranked: the seeds disagree"
    assert listed[("4e12", "rnn_tiny")]["#"] in ("1", "2")
    assert any(line.startswith("rnn_tiny @ 1e12: undecided, the seeds disagree") for line in lines)


def test_a_model_none_of_whose_seeds_translates_did_not_translate(sweep, tmp_path):
    rows, outputs = sweep
    rows = [judged(dataclasses.replace(row, source_use=0.02)) if row["name"] in ("rnn_tiny.1e+12.s1", "rnn_tiny.1e+12.s3")
            else row for row in rows]
    markdown = "\n".join(gate_sentences(compare(rows, outputs)))
    assert markdown.startswith("rnn_tiny @ 1e12 did not translate at this budget (seed 1: its source use is 0.020")
    assert "undecided" not in markdown


def test_outputs_evaluated_before_the_check_are_measured_for_collapse_and_said_unchecked(tmp_path):
    translated, _ = output(0.2, 1)
    rows = [run("t", "transformer", 1, 1e12, 3.0), run("r", "rnn", 1, 1e12, 20.0)]
    constant = ["Ein Mann in einem Boot ."] * 60 + translated[60:]
    write_report(rows, {}, tmp_path, "old", {"t.1e+12.s1": (constant, REFERENCES),
                                             "r.1e+12.s1": (translated, REFERENCES)})
    report = json.loads((tmp_path / "report.json").read_text())
    assert {model["name"]: model["translates"] for model in report["models"]} == {"t.1e+12.s1": "no",
                                                                                  "r.1e+12.s1": "not checked"}
    assert report["comparison"]["tests"] == []  # the only pair has a model that does not translate
    markdown = (tmp_path / "report.md").read_text()
    assert ('t.1e+12.s1 does not translate: 60% of its test outputs are one line ("Ein Mann in einem Boot ."'
            in markdown)
    assert "The translation check was not made for r (evaluated before the evaluate stage measured source use)" \
        in markdown


def test_a_size_that_does_not_translate_is_left_out_of_its_profile_and_named():
    groups = profile_groups(0.5, [1e11, 1e12], lambda budget: (12, 16, 24, 32))
    blind = next(g for g in groups if g.budget == 1e11 and g.preset == "w16")
    blind.valid_loss = Spread(mean=1.5, std=None, each=[1.5])  # would pull the minimum to itself
    blind.translates = gate.DOES_NOT
    (entry,) = isoflop.profiles(groups, draws=100)
    first = entry.profiles[0]
    assert first["not_translating"] == ["transformer.w16"]
    assert [size["preset"] for size in first["sizes"]] == ["w12", "w24", "w32"]
    assert first["optimum"]["parameters"] == pytest.approx(3e4, rel=1e-6)


def test_a_size_that_does_not_translate_is_never_on_the_envelope_of_a_law():
    rows = law_records(families=("transformer",), seeds=(1,))
    comparison = compare(rows, {})
    envelope = comparison.laws[0].envelope
    best = envelope[-1].model
    for row in rows:
        row["translates"] = gate.DOES_NOT if row["model"] == best and row["budget"] == envelope[-1].budget \
            else gate.TRANSLATES
    gated = compare(rows, {})
    last = gated.laws[0].envelope[-1]
    assert last.budget == envelope[-1].budget and last.model != best
