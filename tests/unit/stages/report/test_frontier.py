"""The power law of BLEU against FLOPs, and the frontier drawn from it."""

from __future__ import annotations

import math

import pytest

from stages.report.frontier import crossover, crossovers, fit_power_law, frontier_rows
from stages.report.plots import frontier_figure


def test_the_fit_recovers_a_power_law_exactly():
    flops = [1e12, 3e12, 1e13, 3e13, 1e14]
    law = fit_power_law("transformer", flops, [0.02 * c ** 0.21 for c in flops])
    assert law.b == pytest.approx(0.21, abs=1e-6) and law.a == pytest.approx(0.02, rel=1e-6)
    assert law.r_squared == pytest.approx(1.0) and (law.valid_from, law.valid_to) == (1e12, 1e14)
    assert law.flops_for(law.bleu(5e12)) == pytest.approx(5e12, rel=1e-9)


def test_points_at_zero_bleu_are_left_out_and_one_budget_is_no_law():
    assert fit_power_law("rnn", [1e12, 2e12, 4e12], [0.0, 3.0, 6.0]).points == 2
    assert fit_power_law("rnn", [1e12, 1e12], [3.0, 4.0]) is None
    assert fit_power_law("rnn", [1e12, 2e12], [0.0, 4.0]) is None


def test_a_flat_law_never_reaches_a_level_and_needs_outside_the_range_are_extrapolated():
    flat = fit_power_law("rnn", [1e12, 1e13], [5.0, 5.0])
    rising = fit_power_law("transformer", [1e12, 1e13], [10.0, 20.0])
    rows = {row["family"]: row for row in frontier_rows([flat, rising], levels=(15.0, 40.0))}
    assert rows["rnn"]["flops_for_bleu"]["15"] is None
    inside, beyond = rows["transformer"]["flops_for_bleu"]["15"], rows["transformer"]["flops_for_bleu"]["40"]
    assert not inside["extrapolated"] and 1e12 < inside["flops"] < 1e13
    assert beyond["extrapolated"] and beyond["flops"] == pytest.approx(1e14, rel=1e-9)


def test_two_laws_cross_where_they_predict_the_same_bleu():
    slow_start = fit_power_law("transformer", [1e12, 1e14], [5.0, 40.0])
    fast_start = fit_power_law("rnn", [1e12, 1e14], [10.0, 20.0])
    flops = crossover(slow_start, fast_start)
    assert slow_start.bleu(flops) == pytest.approx(fast_start.bleu(flops))
    assert 1e12 < flops < 1e14 and crossovers([slow_start, fast_start])[0]["measured"]
    assert crossover(slow_start, slow_start) is None


def test_a_crossing_at_a_bleu_no_model_can_score_is_not_reported():
    # They meet at 3e13 FLOPs, within reach of the measured range, but at BLEU ~109.
    steep = fit_power_law("transformer", [1e12, 1e13], [2.0, 30.0])
    shallow = fit_power_law("rnn", [1e12, 1e13], [60.0, 90.0])
    flops = crossover(steep, shallow)
    assert flops == pytest.approx(3e13, rel=1e-6) and steep.bleu(flops) > 100
    assert crossovers([steep, shallow]) == []


def test_the_frontier_plot_has_one_line_per_family_on_log_axes():
    groups, laws = [], []
    for family, model, exponent in (("rnn", "rnn_gru", 0.3), ("transformer", "transformer_tiny", 0.2),
                                    ("decoder_only", "decoder_only_tiny", 0.25)):
        flops = [1e12, 1e13, 1e14]
        groups += [{"family": family, "model": model, "train_flops": c,
                    "bleu": {"mean": 0.01 * c ** exponent, "std": 0.5}} for c in flops]
        laws.append(fit_power_law(family, flops, [0.01 * c ** exponent for c in flops]))
    figure = frontier_figure({"groups": groups, "frontier": frontier_rows(laws)}, "sweep")
    axes = figure.axes[0]
    labelled = [line.get_label() for line in axes.get_lines() if not line.get_label().startswith("_")]
    # Each family's line named by its model, as the report's tables name it.
    assert [label.split(":")[0] for label in labelled] == ["rnn_gru", "transformer_tiny", "decoder_only_tiny"]
    assert axes.get_xscale() == axes.get_yscale() == "log"
    assert math.isclose(float(labelled[0].split("^")[1]), 0.3, abs_tol=0.005)


def test_the_frontier_plot_never_draws_a_law_above_bleu_100_or_far_past_the_budgets():
    # The sweep's steep Transformer law: 4x past its last budget it would pass BLEU 100.
    flops = [3e12, 6e12, 1.2e13, 2.4e13]
    law = fit_power_law("transformer", flops, [5.0, 12.0, 22.0, 60.0])
    groups = [{"family": "transformer", "model": "transformer_tiny", "train_flops": c, "bleu": {"mean": b, "std": None}}
              for c, b in zip(flops, [5.0, 12.0, 22.0, 60.0])]
    assert law.bleu(2.4e13 * 4) > 100  # what the old 4x extrapolation would have drawn
    axes = frontier_figure({"groups": groups, "frontier": frontier_rows([law])}, "sweep").axes[0]
    lines = [line for line in axes.get_lines() if len(line.get_xdata()) > 1]
    assert max(max(line.get_ydata()) for line in lines) <= 100
    assert max(max(line.get_xdata()) for line in lines) <= 2.4e13 * 1.5 * (1 + 1e-9)
    assert min(min(line.get_xdata()) for line in lines) >= 3e12 / 1.5 * (1 - 1e-9)
