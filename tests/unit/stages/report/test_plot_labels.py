"""The BLEU plot's point labels: two models that tie at a budget stay readable."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from stages.report.plots import _Point, _spread_labels  # noqa: E402


def offsets(labels, min_gap=1.0) -> dict[str, tuple[float, float]]:
    figure, axes = plt.subplots()
    _spread_labels(axes, labels, min_gap)
    found = {text.get_text(): text.xyann for text in axes.texts}
    plt.close(figure)
    return found


def test_labels_that_nearly_tie_at_a_budget_move_apart_and_others_stay_beside_their_point():
    # The default job at 6e11: the GRU and ConvS2S both at 21.31 BLEU, their runs' FLOPs
    # a few updates apart; the Transformer far below.
    def label(flops: float, budget: float, bleu: float, text: str, colour: str):
        return _Point(text, text, "family", flops, budget, bleu, "yes"), text, colour

    found = offsets([label(6.0002e11, 6e11, 21.31, "w24.lr3.2e-2", "red"),
                     label(6.0001e11, 6e11, 21.31, "w24.lr1.6e-2", "orange"),
                     label(6.0e11, 6e11, 11.43, "w24.lr8e-3", "blue"),
                     label(2.0e12, 2e12, 21.31, "w32.lr4e-3", "blue")])
    tied = [found["w24.lr3.2e-2"][1], found["w24.lr1.6e-2"][1]]
    assert sorted(tied) == [-12, -3]  # one a line below the other
    assert found["w24.lr8e-3"][1] == found["w32.lr4e-3"][1] == -3  # alone at its BLEU, or at its budget
