"""The tune stage for real: Ray Tune trials that are the train stage itself (Ray Train
workers, DeepSpeed engines) at each rate of a grid, ASHA stopping the weak, one rate
deliberately diverging; the choice cached like any artifact and read by the train runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.core.context import StageContext
from pipeline.config import ExperimentConfig
from pipeline.graph import plan
from stages import train, tune
from stages.tune.artifact import read_choice
from tests.helpers import shipped_config

pytestmark = pytest.mark.slow
RATES = [1e-3, 3e-3, 30.0]  # 30: Adam's steps of 30 make the loss explode


def experiment(in_process: bool = False) -> ExperimentConfig:
    raw = shipped_config("smoke.yaml")
    raw["models"] = [{"name": "t", "family": "transformer", "preset": "tiny"}]
    raw["train"].update(precision="fp32", max_tokens=600, schedule="constant", lr=1e-3, warmup_steps=5,
                        max_steps=4, valid_every=5, valid_bleu_every=None, checkpoint_every=5, log_every=2,
                        in_process=in_process)
    raw["tune"] = {"learning_rates": RATES, "budget": 1.5e10, "grace_validations": 2, "reduction_factor": 3,
                   "max_extensions": 0}
    return ExperimentConfig.model_validate(raw)


# in_process: each trial trains in its trial's own process and reports to Tune itself.
@pytest.mark.parametrize("in_process", [False, True], ids=["ray_train", "in_process"])
def test_tune_chooses_a_rate_never_the_diverging_one_caches_it_and_the_runs_train_with_it(tokenized, tmp_path,
                                                                                            local_ray, in_process):
    config, store = experiment(in_process), ArtifactStore(str(tmp_path / "artifacts"))
    planned = {item.stage.name: item for item in plan(config, store)}
    item = planned["tune/t"]
    assert item.status.state == ArtifactState.MISSING
    assert planned["train/t"].upstream_keys["tune/t"] == item.key  # the runs read the choice by key

    staging = store.staging_dir("tune/t", item.key)
    metrics = tune.run({"tokenize": tokenized}, item.stage.config_of(config), staging, StageContext())
    store.commit("tune/t", item.key, staging, {"config": {}, "metrics": metrics})

    choice = read_choice(store.local_path("tune/t", item.key))
    trials = {row["lr"]: row for row in choice["trials"]}
    assert sorted(trials) == RATES and choice["lr"] in (1e-3, 3e-3) and metrics["lr"] == choice["lr"]
    finite = [trials[rate]["best_valid_loss"] for rate in (1e-3, 3e-3)]
    assert all(loss is not None and math.isfinite(loss) for loss in finite)
    assert trials[choice["lr"]]["best_valid_loss"] == min(finite)
    diverged = trials[30.0]["best_valid_loss"]
    assert diverged is None or diverged > max(finite) + 1.0
    # Each trial trained as the train stage does: its curve and totals are kept.
    completed = [rate for rate, row in trials.items() if not row["stopped_early"]]
    assert completed and all((store.local_path("tune/t", item.key) / "trials" / f"lr_{rate:g}" /
                              "train_report.json").is_file() for rate in completed)
    assert not list(store.local_path("tune/t", item.key).rglob("*.pt"))  # no weights kept

    again = {i.stage.name: i for i in plan(config, store)}
    assert again["tune/t"].status.state == ArtifactState.CACHED and again["tune/t"].key == item.key

    run = planned["train/t"]
    output = tmp_path / "train"
    output.mkdir()
    trained = train.run({"tokenize": tokenized, "tune/t": store.local_path("tune/t", item.key)},
                        run.stage.config_of(config), output, StageContext())
    assert trained["lr"] == choice["lr"] and trained["lr_from"] == "tune/t"
    rates = [row["lr"] for row in map(json.loads, (output / "metrics.jsonl").read_text().splitlines()) if "lr" in row]
    assert rates and max(rates) <= choice["lr"] * (1 + 1e-9)


def test_a_best_rate_at_the_grids_edge_extends_the_grid_and_the_choice_says_if_it_is_still_there(tokenized, tmp_path,
                                                                                                   local_ray, capsys):
    # Rates far below any good one: over four updates the larger always learns more, so
    # the best is the grid's top; one extension tries the next rate up, at the grid's
    # ratio, and that one is the best and again the top. Trials in their own processes:
    # the choice is what this is about, not how the trials start.
    config = experiment(in_process=True)
    config = config.model_copy(update={"tune": config.tune.model_copy(
        update={"learning_rates": [1e-5, 2e-5], "max_extensions": 1})})
    item = {i.stage.name: i for i in plan(config, ArtifactStore(str(tmp_path / "artifacts")))}["tune/t"]
    output = tmp_path / "tune"
    output.mkdir()
    metrics = tune.run({"tokenize": tokenized}, item.stage.config_of(config), output, StageContext())
    choice = read_choice(output)
    assert [(row["lr"], row["extension"]) for row in choice["trials"]] == [(1e-5, False), (2e-5, False),
                                                                           (pytest.approx(4e-5), True)]
    assert choice["lr"] == pytest.approx(4e-5) and choice["extensions"] == 1 and choice["at_edge"] == "highest"
    assert metrics["at_edge"] == "highest" and not list(output.glob("tune_run_*"))
    # Ray Tune's own reports are in the artifact, not on the console.
    kept = (output / "tune_console.log").read_text()
    assert "View detailed results here" in kept and "tune_run_1" in kept
    printed = capsys.readouterr().out
    assert "View detailed results here" not in printed and "Configuration for experiment" not in printed


def test_two_tune_stages_at_once_in_one_ray_job_keep_their_own_trials(tokenized, tmp_path, local_ray):
    """Two tune stages running at once as tasks of one Ray job, as the runner starts them
    on a cluster smaller than their grids: each stage's trials train its own model into
    its own artifact. Both registered their trainable under one name before, and one
    stage's trials ran with the other's model and output, or never started."""
    import ray

    config = experiment(in_process=True)  # how each trial starts is the other tests' subject
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["models"] = [{"name": "t", "family": "transformer", "preset": "tiny"},
                     {"name": "r", "family": "rnn", "preset": "tiny"}]
    raw["tune"] = {**raw["tune"], "learning_rates": [1e-3, 3e-3]}
    config = ExperimentConfig.model_validate(raw)
    planned = {item.stage.name: item for item in plan(config, ArtifactStore(str(tmp_path / "artifacts")))}

    @ray.remote(num_cpus=0)
    def tune_stage(name: str) -> dict:
        item = planned[name]
        output = tmp_path / name.replace("/", "_") / f"{item.key}.partial"
        output.mkdir(parents=True)
        tune.run({"tokenize": tokenized}, item.stage.config_of(config), output, StageContext())
        # A trial ASHA stopped writes no train report; the ones that completed did.
        return {"output": str(output), "families": {
            json.loads(path.read_text())["model"]["family"] for path in output.glob("trials/*/train_report.json")}}

    done = ray.get([tune_stage.remote("tune/t"), tune_stage.remote("tune/r")], timeout=600)
    assert [result["families"] for result in done] == [{"transformer"}, {"rnn"}]
    for result in done:
        output = Path(result["output"])
        assert sorted(row["lr"] for row in read_choice(output)["trials"]) == [1e-3, 3e-3]
        assert sorted(path.name for path in (output / "trials").iterdir()) == ["lr_0.001", "lr_0.003"]
