"""The pieces of evaluation and reporting that only the end-to-end run exercised:
scoring hypotheses, merging models from several sources, and the table formats."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sacrebleu.metrics import BLEU, CHRF

from pipeline.compare import Gathered, merge
from stages.evaluate.scores import score_hypotheses
from stages.shared.inference.beam import Hypothesis
from stages.shared.inference.translator import Translation
from stages.report.records import FIELDS, RunRecord
from stages.report.tables import (
    appendix_markdown,
    display_table,
    html_page,
    markdown,
    signature_lines,
    write_csv,
    write_json,
)
from tests.helpers import comparison_of, group_summary, paired_test, system_interval

REFERENCES = ["Ein Hund läuft am Strand.", "Zwei Männer spielen Fußball.", "Eine Frau liest ein Buch."]


def translations(texts: list[str], scores: list[float], lengths: list[int]) -> list[list[Translation]]:
    return [[Translation(text, Hypothesis(tuple(range(5, 5 + length)), score * 2, score))]
            for text, score, length in zip(texts, scores, lengths)]


def test_score_hypotheses_is_sacrebleu_on_the_best_hypotheses_with_speed_and_mean_score():
    hypotheses = ["Ein Hund rennt am Strand.", "Zwei Männer spielen Fußball.", "Eine Frau liest."]
    scored = score_hypotheses(translations(hypotheses, [-1.0, -2.0, -4.5], [6, 5, 3]), REFERENCES, seconds=2.0)
    assert scored.bleu == pytest.approx(BLEU().corpus_score(hypotheses, [REFERENCES]).score)
    assert scored.chrf == pytest.approx(CHRF().corpus_score(hypotheses, [REFERENCES]).score)
    assert scored.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert scored.mean_score == pytest.approx(-2.5)
    assert scored.sentences_per_second == pytest.approx(1.5)
    assert scored.tokens_per_second == pytest.approx((7 + 6 + 4) / 2.0)  # EOS counted per line
    perfect = score_hypotheses(translations(REFERENCES, [0.0] * 3, [1] * 3), REFERENCES, seconds=1.0)
    assert perfect.bleu == pytest.approx(100.0) and perfect.chrf == pytest.approx(100.0)


def row(name: str, bleu: float | None = 20.0, **fields) -> RunRecord:
    return RunRecord(name=name, family="transformer", parameters=7_580_000, train_tokens=1_100_000,
                     train_seconds=3725.0, train_flops=5e13, mfu=0.433, bleu=bleu, **fields)


def test_merge_keeps_unique_names_and_labels_names_that_repeat():
    first = Gathered("multi30k", rows=[row("rnn"), row("transformer")], curves={"rnn": [{"step": 1}]})
    second = Gathered("smoke", rows=[row("transformer"), row("decoder_only")], curves={"transformer": [{"step": 2}]})
    rows, curves, _ = merge([first, second])
    assert [r["name"] for r in rows] == ["rnn", "multi30k/transformer", "smoke/transformer", "decoder_only"]
    assert curves == {"rnn": [{"step": 1}], "multi30k/transformer": [], "smoke/transformer": [{"step": 2}],
                      "decoder_only": []}
    # The same source given twice: every row still has a name of its own.
    twice, _, _ = merge([first, first])
    assert [r["name"] for r in twice] == ["multi30k/rnn", "multi30k/transformer", "multi30k/rnn#2",
                                          "multi30k/transformer#2"]


def test_the_tables_format_counts_durations_and_missing_values():
    cells = display_table([row("t"), row("bare", bleu=None)])
    assert list(cells.loc[0, ["params", "train tokens", "time", "FLOPs counted", "MFU", "BLEU beam"]]) == [
        "7.58M", "1.10M", "1h02m", "5.00e+13", "43.3%", "20.00"]
    assert cells.loc[1, "BLEU beam"] == "-"


def test_markdown_html_csv_and_json_hold_the_same_rows(tmp_path):
    records = [row("t", sacrebleu_signature="nrefs:1|tok:13a"), row("r", sacrebleu_signature="nrefs:1|tok:intl")]
    text, appendix = markdown(records, "title", ["bleu_vs_flops.png"]), appendix_markdown(records, "title")
    # Formatted cells are not re-parsed as numbers ("5.00e+13" would become "5e+13").
    assert " 5.00e+13 |" in appendix and "5e+13" not in appendix
    assert "![bleu_vs_flops.png](bleu_vs_flops.png)" in text and "| 5.00e+13" not in text
    # Two signatures in use: each names the models it applies to.
    assert signature_lines(records)[:2] == ["BLEU: nrefs:1|tok:13a (t)", "BLEU: nrefs:1|tok:intl (r)"]
    page = html_page(records, "<title>", [])
    assert "&lt;title&gt;" in page and page.count("<tr") == 3  # the header and two models
    write_csv(records, tmp_path / "report.csv")
    assert (tmp_path / "report.csv").read_text().splitlines()[0].split(",") == list(FIELDS)
    write_json(records, {"t": []}, tmp_path / "report.json", "title")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["models"] == [record.to_json() for record in records] and data["fields"] == list(FIELDS)


def test_the_report_shows_each_tuned_size_s_rates_its_losses_and_the_choice(tmp_path):
    from stages.report import write_report
    from stages.tune.artifact import TuneChoice

    def choice(lr: float, trials: list[dict], **more) -> TuneChoice:
        return TuneChoice(**{"lr": lr, "metric": "best validation loss", "budget": 2e12, "best_lr": lr,
                             "prefer_lower_within": None, "extensions": 0, "at_edge": None, "trials": trials, **more})

    tuning = {"t.w64": choice(3e-3, [
        {"lr": 1e-3, "best_valid_loss": 5.38, "validations": 7, "train_flops": 2e12, "stopped_early": False},
        {"lr": 3e-3, "best_valid_loss": 5.25, "validations": 7, "train_flops": 2e12, "stopped_early": False},
        {"lr": 30.0, "best_valid_loss": None, "validations": 2, "train_flops": 3e11, "stopped_early": True}])}
    written = write_report([row("t.w64.2e12", model="t.w64")], {}, tmp_path, "title", tuning=tuning)
    assert tmp_path / "lr_sensitivity.png" in written and (tmp_path / "lr_sensitivity.png").stat().st_size > 0
    text = (tmp_path / "report.md").read_text()
    assert "## Tuned learning rates" in text
    lines = [line for line in text.split("## Tuned learning rates")[1].splitlines() if line.startswith("| t.w64 ")]
    assert [line.split("|")[2].strip() for line in lines] == ["0.001", "0.003", "30"]
    assert "yes" in lines[1] and "no finite loss" in lines[2] and "stopped" in lines[2]
    # Each size's choice as its choice.json holds it, with its model and family (read from the runs' records).
    assert json.loads((tmp_path / "report.json").read_text())["comparison"]["tuning"] == [
        {"model": "t.w64", **tuning["t.w64"].to_json(), "family": "transformer"}]
    assert "transformer: every chosen rate is inside the rates tried (1 of 1 choices)." in text
    # A size whose best is still the top rate after an extension: flagged in the table and the note.
    edge = {"t.w32": choice(4e-3, [
        {"lr": 1e-3, "best_valid_loss": 5.4, "validations": 7, "train_flops": 2e12, "stopped_early": False},
        {"lr": 2e-3, "best_valid_loss": 5.3, "validations": 7, "train_flops": 2e12, "stopped_early": False},
        {"lr": 4e-3, "best_valid_loss": 5.2, "validations": 7, "train_flops": 2e12, "stopped_early": False,
         "extension": True}], extensions=1, at_edge="highest")}
    write_report([row("t.w32.2e12")], {}, tmp_path / "edge", "title", tuning=edge)
    text = (tmp_path / "edge" / "report.md").read_text()
    top = next(line for line in text.splitlines() if line.startswith("| t.w32 ") and "0.004" in line)
    assert "extension" in top and "yes, at the grid's edge" in top
    assert "0 of 1 chosen rates inside the rates tried; at an edge: t.w32 (0.004, the highest tried)." in text
    # A rate chosen inside the grid by tune.prefer_lower_within below a best trial at its top: named.
    lower = {"t.w32": dataclasses.replace(edge["t.w32"], lr=2e-3, best_lr=4e-3, prefer_lower_within=0.2)}
    write_report([row("t.w32.2e12")], {}, tmp_path / "lower", "title", tuning=lower)
    text = (tmp_path / "lower" / "report.md").read_text()
    assert ("t: every chosen rate is inside the rates tried (1 of 1 choices). Inside only by "
            "tune.prefer_lower_within, the best trial's rate at an edge: t.w32 (best 0.004, the highest tried; "
            "chosen 0.002).") in text
    without = write_report([row("t.w64.2e12")], {}, tmp_path / "plain", "title")
    assert "Tuned learning rates" not in (tmp_path / "plain" / "report.md").read_text()
    assert tmp_path / "plain" / "lr_sensitivity.png" not in without


def test_the_bleu_plot_draws_the_intervals_as_bands_and_a_model_that_does_not_translate_hollow(tmp_path,
                                                                                                monkeypatch):
    from matplotlib.collections import PathCollection, PolyCollection

    from stages.report import plots

    kept = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: kept.append(figure.axes[0]))
    groups = [group_summary(f"{model} @ {budget:g}", bleu, model=model, family=family, budget=budget,
                            train_flops=budget, translates=translates)
              for model, family, budget, bleu, translates in (("t", "transformer", 1e12, 3.0, "no"),
                                                              ("t", "transformer", 1e13, 20.0, "yes"),
                                                              ("r", "rnn", 1e12, 12.0, "yes"),
                                                              ("r", "rnn", 1e13, 18.0, "yes"))]
    intervals = {group.label: {"BLEU": system_interval(group.bleu.mean, group.bleu.mean - 1, group.bleu.mean + 9)}
                 for group in groups}
    plots._bleu_vs_flops([], comparison_of(groups=groups, intervals=intervals), tmp_path / "bleu.png", "t")
    (axes,) = kept
    marks = [c for c in axes.collections if isinstance(c, PathCollection)]
    hollow = [c for c in marks if c.get_facecolor().size == 0 or c.get_facecolor()[0][3] == 0]
    assert len(marks) == 4 and len(hollow) == 1 and hollow[0].get_offsets()[0][1] == 3.0
    assert sum(isinstance(c, PolyCollection) for c in axes.collections) == 2  # a band per model
    assert axes.get_ylim()[0] == 0 and axes.get_ylim()[1] > 29.0  # the highest band in view


def test_with_a_selection_the_bleu_plot_draws_one_line_per_model_through_each_budget_s_choice(tmp_path,
                                                                                               monkeypatch):
    from stages.report import plots
    from stages.select.artifact import BudgetChoice, SelectionChoice

    kept = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: kept.append(figure.axes[0]))
    groups = [group_summary(f"{model} @ {budget:g}", bleu, model=model, family="rnn", budget=budget,
                            train_flops=budget)
              for model, budget, bleu in (("rnn.w24.lr3.2e-2", 6e11, 15.8), ("rnn.w32.lr1.6e-2", 2e12, 27.0),
                                          ("rnn.big", 2e12, 20.0))]
    chose = [BudgetChoice(budget=budget, size=size, lr=lr, size_edge=None, rate_edge=None, candidates=[])
             for budget, size, lr in ((6e11, "w24", 3.2e-2), (2e12, "w32", 1.6e-2))]
    selection = [SelectionChoice(model="rnn", seeds=[101], metric="final validation loss", budgets=chose, extend=[],
                                 extensions_left=0)]
    plots._bleu_vs_flops([], comparison_of(groups=groups, selection=selection), tmp_path / "bleu.png", "t")
    (axes,) = kept
    # rnn.big is not rnn's choice (a model of another name that starts alike): a line of its own.
    assert [line.get_label() for line in axes.get_lines()] == ["rnn", "rnn.big"]
    assert list(axes.get_lines()[0].get_ydata()) == [15.8, 27.0]
    assert [text.get_text() for text in axes.texts] == ["w24.lr3.2e-2", "w32.lr1.6e-2"]


def test_the_answer_ranks_each_budget_s_models_with_the_next_one_s_difference_and_lists_the_withheld():
    from stages.report.comparison_tables import answer

    def group(model: str, budget: float, bleu: float, translates: str = "yes"):
        return group_summary(f"{model} @ {budget:g}", bleu, model=model, budget=budget, translates=translates)

    def test(a: str, b: str, delta: float, role: str = "primary", significant: bool | None = True):
        return paired_test(a=a, b=b, role=role, delta=delta, delta_low=delta - 1, delta_high=delta + 1,
                           significant=significant)

    groups = [group("t", 1e12, 8.0), group("r", 1e12, 15.0), group("c", 1e12, 20.0), group("d", 1e12, 3.0, "no")]
    # A test's delta is b - a: r - c = -5 (c leads by 5); r - t = +7 (r leads by 7).
    tests = [test("c @ 1e+12", "r @ 1e+12", -5.0), test("t @ 1e+12", "r @ 1e+12", 7.0, "exploratory", None)]
    section = answer(comparison_of(groups=groups, tests=tests,
                                   intervals={"c @ 1e+12": {"BLEU": system_interval(20.0, 19.0, 21.0)}}))
    rows = section.table.values.tolist()
    assert [row[1:3] for row in rows] == [["1", "c"], ["2", "r"], ["3", "t"], ["-", "d"]]
    assert rows[0][3] == "20.00 [19.00, 21.00]" and rows[1][3] == "15.00"
    assert rows[0][5:] == ["5.00 [+4.00, +6.00]", "significant"]  # c above r: the sign turned to c's lead
    assert rows[1][5:] == ["7.00 [+6.00, +8.00]", "exploratory"]
    assert rows[2][5:] == ["-", "-"] and rows[3][6] == "not ranked: does not translate"
    assert answer(comparison_of(groups=[group("t", 1e12, 8.0)])) is None  # one model: nothing to rank


def test_the_selection_shows_each_choice_and_its_runner_up_and_the_appendix_every_candidate():
    from stages.report.comparison_tables import appendix, sections
    from stages.select.artifact import BudgetChoice, CandidateScore, SelectionChoice

    def score(size: str, lr: float, loss: float, translates: str = "yes") -> CandidateScore:
        return CandidateScore(size=size, lr=lr, valid_loss=loss, valid_losses=[loss], source_use=[1.0],
                              translates=translates, why=None if translates == "yes" else "its source use is 0.1")

    # At 6e11 the lowest loss does not translate: the choice is the next, and the runner-up
    # the one after it. At 2e12 the choice is the largest size, at the top of its rates.
    chose = [BudgetChoice(budget=6e11, size="w32", lr=8e-3, size_edge=None, rate_edge=None,
                          candidates=[score("w24", 8e-3, 3.9, "no"), score("w32", 8e-3, 4.0),
                                      score("w48", 8e-3, 4.2)]),
             BudgetChoice(budget=2e12, size="w48", lr=1.6e-2, size_edge="largest", rate_edge="highest",
                          candidates=[score("w32", 8e-3, 3.3), score("w48", 1.6e-2, 3.1)])]
    comparison = comparison_of(selection=[SelectionChoice(model="rnn", seeds=[101], metric="final validation loss",
                                                          budgets=chose, extend=[], extensions_left=0)])
    (selection,) = [section for section in sections(comparison) if section.title == "Selection"]
    assert selection.table.values.tolist() == [
        ["rnn", "6e11", "w32, 0.008 (4.0000)", "w48, 0.008 (4.2000)", "no", "2 of 3"],
        ["rnn", "2e12", "w48, 0.016 (3.1000)", "w32, 0.008 (3.3000)", "largest size and highest rate", "2 of 2"]]
    assert "1 of 2 choices are still at an edge of what was tried" in selection.note
    (candidates,) = [section for section in appendix(comparison) if section.title == "Selection candidates"]
    assert len(candidates.table) == 5 and candidates.table.iloc[:, -1].tolist().count("chosen") == 2
    assert candidates.table.iloc[0]["translates"] == "no: its source use is 0.1"
