"""Select, then confirm (pipeline/selection.py, the config's select section): the
candidates train on the selection seeds only, the runs that confirm a choice on the
experiment's seeds only, rounds follow what the store's select artifacts chose, and the
report compares the confirming runs alone."""

from __future__ import annotations

import json

import pytest

from pipeline.config import ExperimentConfig
from pipeline.core.artifacts import ArtifactStore
from pipeline.graph import find_stage, plan
from pipeline.selection import current_round, plan_experiment
from stages.select.artifact import BudgetChoice, Candidate, SelectionChoice
from tests.helpers import shipped_config

BUDGETS = [1e12, 3e12]


def raw(**select) -> dict:
    data = shipped_config("multi30k_en_de.yaml")
    data["models"] = [{"name": "transformer", "family": "transformer", "settings": {"pre_norm": True},
                       "sizes": ["w24", "w32", "w48"]},
                      {"name": "rnn", "family": "rnn", "settings": {"cell": "gru"}, "sizes": ["w32", "w48"]}]
    data.update(budgets=BUDGETS, seeds=[1, 2, 3],
                select={"seeds": [101], "learning_rates": [4e-3, 8e-3], "max_extensions": 1, **select})
    return data


def config(**select) -> ExperimentConfig:
    return ExperimentConfig.model_validate(raw(**select))


def seeds_of(names: list[str]) -> set[str]:
    return {name.split(".")[-1] for name in names if not name.endswith(".stable")} | {
        name.split(".")[-2] for name in names if name.endswith(".stable")}


def test_candidates_train_on_the_selection_seeds_and_nothing_is_compared_before_the_choice():
    experiment = config()
    runs = [run.name for run in experiment.selection_runs()]
    # Every size at every rate, at both budgets, branched from one stable phase each.
    assert "transformer.w32.lr8e-3.3e12.s101" in runs and "transformer.w32.lr8e-3.1e12.s101.stable" in runs
    assert len([run for run in runs if not run.endswith(".stable")]) == (3 + 2) * 2 * len(BUDGETS)
    assert seeds_of(runs) == {"s101"}
    assert experiment.trained_models() == [] and experiment.stable_segments() == []
    select = dict(experiment.select_stage_configs())["select/rnn"]
    assert {(run.size, run.lr, run.budget, run.seed) for run in select.runs} == {
        (size, lr, budget, 101) for size in ("w32", "w48") for lr in (4e-3, 8e-3) for budget in BUDGETS}
    assert select.ladder[0] == "w3" and select.extensions_left == 1


def test_the_confirming_runs_train_the_choice_on_the_experiment_s_seeds_and_alone_are_reported():
    chosen = {"transformer": {1e12: ("w24", 8e-3), 3e12: ("w32", 4e-3)},
              "rnn": {1e12: ("w48", 4e-3), 3e12: ("w48", 4e-3)}}
    settled = config().model_copy(update={"chosen": chosen})
    runs = [run.name for run in settled.trained_models()]
    assert sorted(runs) == sorted(
        [f"transformer.w24.lr8e-3.1e12.s{seed}" for seed in (1, 2, 3)]
        + [f"transformer.w32.lr4e-3.3e12.s{seed}" for seed in (1, 2, 3)]
        + [f"rnn.w48.lr4e-3.{budget}.s{seed}" for budget in ("1e12", "3e12") for seed in (1, 2, 3)])
    # The rnn's one configuration at both budgets branches from one stable phase per seed.
    segments = [run.name for run in settled.stable_segments()]
    assert "rnn.w48.lr4e-3.3e12.s1.stable" in segments and "rnn.w48.lr4e-3.1e12.s1.stable" in segments
    report = settled.report_stage_config()
    # A selection seed never reaches the report: no verdict, interval or test sees it.
    assert seeds_of(report.models) == {"s1", "s2", "s3"} and report.selected == ["select/transformer", "select/rnn"]
    trained = settled.trained_models()
    assert {run.train["lr"] for run in trained if run.name.startswith("transformer.w24")} == {8e-3}
    assert {run.train["max_train_flops"] for run in trained if run.run_of == "transformer.w24.lr8e-3"} == {1e12}


def test_a_model_s_own_rates_replace_the_experiment_s_for_its_sizes_only():
    data = raw()
    data["models"][1]["select"] = {"learning_rates": [3.2e-2, 1.6e-2]}
    experiment = ExperimentConfig.model_validate(data)
    assert experiment.first_candidates() == {
        "transformer": [(size, lr) for size in ("w24", "w32", "w48") for lr in (4e-3, 8e-3)],
        "rnn": [(size, lr) for size in ("w32", "w48") for lr in (1.6e-2, 3.2e-2)]}
    assert "rnn.w48.lr3.2e-2.3e12.s101" in [run.name for run in experiment.selection_runs()]


@pytest.mark.parametrize("change, message", [
    (lambda data: data.update(seeds=[1, 101]), "select.seeds [101] are in 'seeds' too"),
    (lambda data: data["models"][1].update(select={"learning_rates": [0.0]}),
     "model 'rnn': select.learning_rates: Value error, rates must be distinct and above 0"),
    (lambda data: data["models"][1].update(select={"seeds": [7]}), "model 'rnn': select.seeds is the experiment's"),
    (lambda data: (data.pop("select"), data["models"][1].update(select={"learning_rates": [1e-2]})),
     "model 'rnn': select overrides the experiment's select section"),
    (lambda data: data["models"][1].update(sizes=["w32"]), "select needs two or more sizes"),
    (lambda data: data["models"][0].update(sizes=["w24", "small"]), "['small'] are not"),
    (lambda data: data["models"][0].update(train={"lr": 1e-3}), "select chooses each size's rate"),
    (lambda data: data.update(tune={"learning_rates": [1e-3, 2e-3], "budget": 1e11}), "drop 'tune'"),
    (lambda data: data.update(budgets=[]), "list them in 'budgets'"),
    (lambda data: data["select"].update(seeds=[]), "select.seeds"),
])
def test_a_select_config_that_cannot_work_is_refused_naming_its_key(change, message):
    data = raw()
    change(data)
    with pytest.raises(ValueError) as error:
        ExperimentConfig.model_validate(data)
    assert message in str(error.value)


def commit_choices(store: ArtifactStore, experiment: ExperimentConfig, extend: dict[str, list[Candidate]],
                   chosen: dict[str, tuple[str, float]]) -> None:
    """Write each select stage's artifact of this round as the stage would."""
    planned = plan(experiment, store)
    for name, section in experiment.select_stage_configs():
        item = find_stage(planned, name)
        size, lr = chosen[section.model]
        choice = SelectionChoice(model=section.model, seeds=[101], metric="final validation loss",
                                 budgets=[BudgetChoice(budget=budget, size=size, lr=lr, size_edge=None,
                                                       rate_edge=None, candidates=[]) for budget in BUDGETS],
                                 extend=extend.get(section.model, []), extensions_left=section.extensions_left)
        staging = store.staging_dir(name, item.key)
        (staging / "choice.json").write_text(json.dumps(choice.to_json()))
        store.commit(name, item.key, staging, {"config": {}, "metrics": {}})


def test_rounds_follow_the_store_s_choices_until_settled(tmp_path):
    store, experiment = ArtifactStore(str(tmp_path)), config()
    first = current_round(experiment, store)
    assert first.chosen is None and first.extensions_used == 0
    assert any(item.stage.name == "select/rnn" and item.will_run for item in plan_experiment(experiment, store))

    # The transformer's choice sat at an edge: the next round adds w16, and keeps the rest.
    commit_choices(store, first, {"transformer": [Candidate(size="w16", lr=8e-3)]},
                   {"transformer": ("w24", 8e-3), "rnn": ("w48", 4e-3)})
    second = current_round(experiment, store)
    assert second.chosen is None and second.extensions_used == 1
    assert ("w16", 8e-3) in second.candidates["transformer"] and len(second.candidates["rnn"]) == 4
    sections = dict(second.select_stage_configs())
    assert sections["select/transformer"].extensions_left == 0
    assert {run.size for run in sections["select/transformer"].runs} == {"w16", "w24", "w32", "w48"}

    commit_choices(store, second, {}, {"transformer": ("w16", 8e-3), "rnn": ("w48", 4e-3)})
    settled = current_round(experiment, store)
    assert settled.chosen == {"transformer": {1e12: ("w16", 8e-3), 3e12: ("w16", 8e-3)},
                              "rnn": {1e12: ("w48", 4e-3), 3e12: ("w48", 4e-3)}}
    stages = [item.stage.name for item in plan_experiment(experiment, store)]
    assert "report" in stages and "train/transformer.w16.lr8e-3.3e12.s3" in stages
    assert "train/transformer.w16.lr8e-3.3e12.s101" in stages  # the candidates stay in the graph, cached


def test_the_1e13_config_reuses_every_run_the_default_job_trained(tmp_path):
    """configs/multi30k_en_de_1e13.yaml carries the default job up to 1e13: on one artifact
    root, each of the default's candidate runs (stable phases and decays) has the same key
    in it, so that only the fourth size and the phases beyond 2e12 are new."""
    from pipeline.config import load_config
    from tests.helpers import REPO

    store = ArtifactStore(str(tmp_path))
    keys = {name: {item.stage.name: item.key for item in plan(load_config(REPO / "configs" / name), store)}
            for name in ("multi30k_en_de.yaml", "multi30k_en_de_1e13.yaml")}
    default, larger = keys["multi30k_en_de.yaml"], keys["multi30k_en_de_1e13.yaml"]
    trained = [name for name in default if name.startswith("train/")]
    assert len(trained) == 4 * 3 * 2 * 4  # each candidate: two stable segments and two decays
    assert {name: larger.get(name) for name in trained} == {name: default[name] for name in trained}
    assert "train/rnn_gru.w64.lr1.6e-2.1e13.s101" in larger and "train/transformer.w48.lr4e-3.1e13.s101" in larger
