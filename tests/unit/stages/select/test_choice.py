"""The select stage's choice: the lowest validation loss among candidates that
translate at each budget, an edge of the sizes or rates tried extended past it, and the
choice read back as written."""

from __future__ import annotations

import json

import pytest

from stages.select.artifact import SelectionChoice, parse_selection
from stages.select.choice import Measured, choose, extensions
from stages.select.config import width_ladder
from stages.shared import gate

LADDER = width_ladder(["tiny", "w8", "w3", "w64", "w12", "w16", "w24", "w32", "w48", "w4", "w6"])


def run(size: str, lr: float, loss: float, budget: float = 1e12, seed: int = 101, use: float = 1.0,
        error: float | None = 0.01) -> Measured:
    return Measured(size=size, lr=lr, budget=budget, seed=seed, valid_loss=loss, source_use=use,
                    source_use_error=error)


def test_the_width_ladder_is_the_w_presets_narrowest_first():
    assert LADDER == ["w3", "w4", "w6", "w8", "w12", "w16", "w24", "w32", "w48", "w64"]


def test_the_lowest_loss_among_candidates_that_translate_is_chosen_at_each_budget():
    measured = [run("w16", 4e-3, 3.1), run("w24", 4e-3, 2.9), run("w32", 4e-3, 2.7, use=0.1),
                run("w16", 4e-3, 2.6, budget=3e12), run("w24", 4e-3, 2.4, budget=3e12),
                run("w32", 4e-3, 2.5, budget=3e12)]
    low, high = choose(measured, [1e12, 3e12], LADDER)
    # w32 had the lowest loss at 1e12 but does not translate: never chosen.
    assert (low.size, low.lr, low.size_edge) == ("w24", 4e-3, None)
    w32 = next(score for score in low.candidates if score.size == "w32")
    assert w32.translates == gate.DOES_NOT and "0.100" in w32.why
    assert (high.size, high.size_edge, high.rate_edge) == ("w24", None, None)  # one rate: no rate edge
    assert [score.size for score in high.candidates] == ["w16", "w24", "w32"]  # narrowest first


def test_the_mean_over_selection_seeds_chooses_and_every_seed_must_translate():
    measured = [run("w16", 4e-3, 3.0, seed=101), run("w16", 4e-3, 2.0, seed=102),  # mean 2.5
                run("w24", 4e-3, 2.4, seed=101), run("w24", 4e-3, 2.8, seed=102),  # mean 2.6
                run("w32", 4e-3, 1.0, seed=101), run("w32", 4e-3, 1.0, seed=102, use=0.251, error=0.01)]
    (choice,) = choose(measured, [1e12], LADDER)
    assert choice.size == "w16" and choice.candidates[0].valid_losses == [3.0, 2.0]
    undecided = choice.candidates[2]
    assert undecided.translates == gate.UNDECIDED and undecided.why.startswith("seed 102: its source use, 0.251")


def test_nothing_is_chosen_where_no_candidate_translates():
    (choice,) = choose([run("w16", 4e-3, 3.0, use=0.0), run("w24", 4e-3, 2.0, use=0.01)], [1e12], LADDER)
    assert choice.size is None and choice.lr is None and extensions([choice], LADDER) == []


def test_a_choice_at_an_edge_of_the_sizes_or_rates_extends_them_past_it():
    measured = [run(size, lr, loss) for size, lr, loss in
                [("w16", 2e-3, 3.0), ("w16", 4e-3, 2.9), ("w24", 2e-3, 3.1), ("w24", 4e-3, 3.2),
                 ("w32", 2e-3, 3.3), ("w32", 4e-3, 3.4)]]
    (choice,) = choose(measured, [1e12], LADDER)
    assert (choice.size, choice.lr, choice.size_edge, choice.rate_edge) == ("w16", 4e-3, "smallest", "highest")
    added = {(entry.size, entry.lr) for entry in extensions([choice], LADDER)}
    # The next narrower width at the rates the chosen size tried, and the next rate up at the grid's ratio.
    assert added == {("w12", 2e-3), ("w12", 4e-3), ("w16", 8e-3)}


def test_the_largest_size_extends_upwards_and_the_ladder_s_end_stops_it():
    top = [run("w32", 4e-3, 3.0), run("w48", 4e-3, 2.9), run("w64", 4e-3, 2.8)]
    (choice,) = choose(top, [1e12], LADDER)
    assert choice.size_edge == "largest" and extensions([choice], LADDER) == []  # w64 ends this ladder
    (choice,) = choose(top[:2], [1e12], LADDER)
    assert [(entry.size, entry.lr) for entry in extensions([choice], LADDER)] == [("w64", 4e-3)]


def test_a_candidate_tried_already_is_never_added_again():
    # At 1e12 the smallest size wins (extend to w12); at 3e12, w12 was tried already.
    measured = [run("w12", 4e-3, 3.5, budget=3e12), run("w16", 4e-3, 2.9, budget=3e12),
                run("w24", 4e-3, 3.0, budget=3e12), run("w12", 4e-3, 3.5), run("w16", 4e-3, 2.9),
                run("w24", 4e-3, 3.0)]
    assert extensions(choose(measured, [1e12, 3e12], LADDER), LADDER) == []


def test_the_choice_round_trips_through_its_json_and_a_renamed_field_is_named():
    (choice,) = choose([run("w16", 4e-3, 3.0), run("w24", 4e-3, 2.9)], [1e12], LADDER)
    written = SelectionChoice(model="rnn", seeds=[101], metric="final validation loss", budgets=[choice],
                              extend=extensions([choice], LADDER), extensions_left=1)
    text = json.dumps(written.to_json())
    assert parse_selection(text, "choice.json") == written
    data = json.loads(text)
    data["budgets"][0]["chosen_size"] = data["budgets"][0].pop("size")
    with pytest.raises(ValueError, match=r"choice\.json: SelectionChoice\.budgets\[0\] needs field 'size'"):
        parse_selection(json.dumps(data), "choice.json")
