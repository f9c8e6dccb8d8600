"""Each family's envelope and its laws in the report (stages/report/compute_laws.py):
the envelope takes the best size at each budget and flags the grid's edges, the laws are
fitted through it and judged on the budgets they did not see, bounds are not estimates,
and the report's tables say so."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stages.report.comparison import compare
from stages.report.comparison_tables import sections
from stages.report.records import RunRecord

BUDGETS = np.geomspace(1e12, 4e13, 6)  # 1.6 decades
SIZES = {"w64": 0.8e6, "w128": 2.3e6, "w256": 7.3e6}


def loss_of(family: str, parameters: float, flops: float) -> float:
    """A Chinchilla-like surface: each size saturates at its own loss, the small one
    early, so that the best size grows with the budget."""
    floor = 1.5 if family == "transformer" else 1.9
    return floor + 100.0 * parameters ** -0.3 + 830.0 * (flops / parameters) ** -0.45


def records(families=("transformer", "rnn"), seeds=(1, 2)) -> list[RunRecord]:
    rng = np.random.default_rng(0)
    found = []
    for family in families:
        for size, parameters in SIZES.items():
            for budget in BUDGETS:
                for seed in seeds:
                    loss = loss_of(family, parameters, budget) * (1 + 0.003 * rng.standard_normal())
                    found.append(RunRecord(
                        name=f"{family}.{size}.{budget:.2g}.s{seed}", model=f"{family}.{size}", seed=seed,
                        budget=float(budget), family=family, preset=size, parameters=parameters,
                        non_embedding_parameters=0.8 * parameters,
                        train_tokens=float(budget) / (6 * parameters), train_flops=float(budget),
                        stop_reason="max_train_flops", best_valid_ppl=math.exp(loss), bleu=80.0 - 12.0 * loss,
                        chrf=50.0))
    return found


@pytest.fixture(scope="module")
def comparison() -> dict:
    return compare(records(), {})


def test_the_envelope_is_the_best_size_at_each_budget_and_grows_with_the_budget(comparison):
    laws = {entry["family"]: entry for entry in comparison.laws}
    assert set(laws) == {"transformer", "rnn"}
    envelope = laws["transformer"]["envelope"]
    assert [point["budget"] for point in envelope] == pytest.approx(list(BUDGETS))
    for point in envelope:
        best = min(SIZES, key=lambda size: loss_of("transformer", SIZES[size], point["budget"]))
        assert point["preset"] == best and point["model"] == f"transformer.{best}"
    sizes = [SIZES[point["preset"]] for point in envelope]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_each_family_gets_both_laws_with_intervals_and_leave_one_out_errors(comparison):
    for entry in comparison.laws:
        for metric in ("valid_loss", "bleu"):
            saturating, power = entry[metric]["saturating"], entry[metric]["power"]
            assert len(saturating["leave_one_out"]["budgets"]) == len(BUDGETS)
            low, high = saturating["interval"]["alpha"]
            assert low <= saturating["alpha"] <= high and saturating["draws"] > 900
            assert power["choice"] in ("kept", "dropped", "same law: E at its bound")
            assert saturating["predicts"] == (saturating["leave_one_out"]["mean_absolute_error"] < min(
                saturating["leave_one_out"]["line_mean_absolute_error"],
                saturating["leave_one_out"]["naive_mean_absolute_error"]))
    loss = {entry["family"]: entry["valid_loss"]["saturating"] for entry in comparison.laws}
    assert loss["transformer"]["E"] < loss["rnn"]["E"]  # their floors are 1.5 and 1.9 plus what no size reaches


def test_the_report_states_the_envelope_the_laws_and_withholds_crossovers_outside_the_range(comparison):
    titles = {section.title: section for section in sections(comparison)}
    envelope, laws = titles["Compute-optimal size per budget"], titles["Laws that predict"]
    assert len(envelope.table) == 2 * len(BUDGETS)
    assert set(laws.table["law"]) == {"saturating", "power"} and set(laws.table["value"]) == {"valid_loss", "bleu"}
    # The transformer's loss stays below the RNN's everywhere measured: no crossover.
    (crossing,) = comparison.law_crossovers
    assert crossing["flops"] == "beyond the measured range"
    assert "beyond the measured range" in laws.note


def test_fewer_than_four_budgets_fit_no_law():
    few = [record for record in records(families=("rnn",)) if record["budget"] <= BUDGETS[2] * 1.001]
    assert compare(few, {})["laws"] == []


def test_the_isoflop_and_envelope_figures_have_a_curve_per_budget_and_a_law_per_family(comparison, tmp_path):
    from stages.report.plots import ENVELOPE, ISOFLOP, OPTIMAL_SIZE, envelope_figure, isoflop_figure, write_plots

    isoflop = isoflop_figure(comparison, "frontier")
    loss_axes = isoflop.axes[0]
    # Per budget: its sizes' means and its parabola; a star where the minimum is interior.
    assert len([line for line in loss_axes.get_lines() if len(line.get_xdata()) == len(SIZES)]) == len(BUDGETS)
    assert len([line for line in loss_axes.get_lines() if len(line.get_xdata()) == 60]) == len(BUDGETS)
    interior = sum(profile["optimum"] is not None for profile in comparison.isoflop[0]["profiles"])
    assert len([line for line in loss_axes.get_lines() if line.get_marker() == "*"]) == interior
    assert loss_axes.get_xscale() == "log"
    envelope = envelope_figure(comparison, "frontier").axes[0]
    labels = [line.get_label() for line in envelope.get_lines() if not line.get_label().startswith("_")]
    assert [label.split(":")[0] for label in labels] == ["transformer", "rnn"]
    assert {ISOFLOP, OPTIMAL_SIZE, ENVELOPE} <= set(write_plots(records(), {}, tmp_path, "frontier", comparison))


def test_a_family_none_of_whose_runs_translates_gets_an_empty_panel_beside_the_baselines(tmp_path):
    """The CPU frontier study's report failed on this: every profile of a family emptied
    by the translation gate left its log-scaled panel with nothing to scale but the
    baselines' horizontal lines."""
    from stages.report.comparison_records import Baselines
    from stages.report.plots import isoflop_figure

    found = records()
    for record in found:
        if record["family"] == "rnn":
            record.update(translates="no", gate_reasons=["its source use is 0.1 nats per target token"])
    comparison = compare(found, {})
    comparison.baselines = Baselines(nats_per_token={"1": 5.9, "2": 3.37, "4": 2.45}, train_sentences=100,
                                     valid_sentences=10, vocab_size=64, smoothing="interpolated Kneser-Ney")
    figure = isoflop_figure(comparison, "frontier")
    empty = [axes for axes in figure.axes if any(text.get_text() == "no size in a profile" for text in axes.texts)]
    assert [axes.get_xscale() for axes in empty] == ["linear", "linear"]  # the rnn's loss and BLEU panels
    figure.savefig(tmp_path / "isoflop.png")


def test_a_size_that_diverged_after_its_best_validation_is_judged_by_the_weights_it_ended_with():
    """A run whose loss was lowest before it diverged (a branched budget's curve holds its
    stable phase's too) enters the envelope with its last validation loss, not its best."""
    found = records(families=("transformer",), seeds=(1,))
    top = max(BUDGETS)
    best_there = min(SIZES, key=lambda size: loss_of("transformer", SIZES[size], top))
    for record in found:
        record["final_valid_loss"] = math.log(record["best_valid_ppl"])
        if record["budget"] == top and record["preset"] == best_there:
            record["best_valid_ppl"] = math.exp(0.5)  # lower than any size's, long before the end
            record["final_valid_loss"] = 9.0  # where it ended: diverged
    (entry,) = compare(found, {})["laws"]
    point = next(point for point in entry["envelope"] if point["budget"] == pytest.approx(top))
    assert point["preset"] != best_there and point["valid_loss"] < 9.0


def test_an_envelope_at_the_grids_edge_is_flagged_and_an_undetermined_floor_is_said_so():
    # Every size's loss a pure power of the budget, the smallest always best: each cell
    # of the envelope is at the grid's edge, and the law's floor sits on its bound 0.
    found = []
    for size, parameters in SIZES.items():
        for budget in BUDGETS:
            for seed in (1, 2):
                loss = parameters ** 0.1 * 3e3 * budget ** -0.2 * (1 + 0.001 * seed)
                found.append(RunRecord(name=f"t.{size}.{budget:.2g}.s{seed}", model=f"t.{size}", seed=seed,
                                       budget=float(budget), family="transformer", preset=size,
                                       parameters=parameters, train_flops=float(budget),
                                       stop_reason="max_train_flops", best_valid_ppl=math.exp(loss),
                                       bleu=30.0 - loss, chrf=50.0))
    comparison = compare(found, {})
    (entry,) = comparison.laws
    assert {point["edge"] for point in entry["envelope"]} == {"smallest"}
    saturating = entry["valid_loss"]["saturating"]
    assert saturating["E_at_bound"] and saturating["interval"]["E"] is None
    assert entry["valid_loss"]["power"]["choice"] == "same law: E at its bound"
    titles = {section.title: section for section in sections(comparison)}
    assert "not determined (at bound)" in set(titles["Laws that predict"].table["E [95%]"])
    assert "smallest size tried" in titles["Compute-optimal size per budget"].table["grid edge"].iloc[0]
    assert f"In {len(BUDGETS)} of {len(BUDGETS)} cells" in titles["Compute-optimal size per budget"].note
