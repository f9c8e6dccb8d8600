"""benchmarks/statistics/same_recipe.py: the splits of six seeds three against three, each once."""

from __future__ import annotations

from benchmarks.statistics.same_recipe import halves, splits


def test_six_seeds_split_three_against_three_in_ten_ways_each_once():
    found = splits([4, 1, 2, 3, 6, 5])
    assert len(found) == 10 and all(first[0] == 1 and len(set(first)) == 3 for first in found)
    partitions = {frozenset([frozenset(first), frozenset(set(range(1, 7)) - set(first))]) for first in found}
    assert len(partitions) == 10  # no split is another with its sides swapped


def test_each_model_s_halves_become_two_models_declared_against_each_other():
    rows = [{"name": f"{model}.s{seed}", "model": model, "seed": seed} for model in ("gru", "convs2s")
            for seed in range(1, 7)]
    split, declared = halves(rows, (1, 4, 5))
    assert declared == [["gru.first", "gru.second"], ["convs2s.first", "convs2s.second"]]
    assert {row["seed"] for row in split if row["model"] == "gru.first"} == {1, 4, 5}
    assert {row["seed"] for row in split if row["model"] == "convs2s.second"} == {2, 3, 6}
    assert rows[0]["model"] == "gru"  # the gathered rows are left as they were
