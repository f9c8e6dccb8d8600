"""How many tuning trials run at once, and what the tune stage claims of the cluster."""

from stages.shared.models.spec import ModelSpec
from stages.train.config import TrainConfig
from stages.tune import concurrent_trials, worker_resources
from stages.tune.config import TuneConfig, TuneStageConfig


def stage(rates=(1e-3, 2e-3, 4e-3, 8e-3), **train) -> TuneStageConfig:
    return TuneStageConfig(model=ModelSpec(name="t", family="transformer", preset="tiny"),
                           train=TrainConfig(max_steps=10, **train),
                           tune=TuneConfig(learning_rates=list(rates), budget=1e9))


def test_the_whole_grid_at_once_where_the_cluster_holds_it():
    assert concurrent_trials(stage(workers=2, cpus_per_worker=2), {"CPU": 16.0}) == 4  # the grid's size
    assert concurrent_trials(stage(rates=(1e-3, 1e-2), workers=1, cpus_per_worker=1), {"CPU": 2.0}) == 2
    assert worker_resources(stage(workers=2, cpus_per_worker=2), {"CPU": 16.0}) == {"CPU": 16.0}


def test_a_cluster_smaller_than_the_grid_runs_one_trial_at_a_time_and_claims_one():
    """Two of three trials on two CPUs would hold the whole cluster, and the third would
    run alone beside an idle CPU; one at a time lets another stage use the second."""
    assert concurrent_trials(stage(rates=(1e-3, 2e-3, 4e-3), workers=1, cpus_per_worker=1), {"CPU": 2.0}) == 1
    assert worker_resources(stage(rates=(1e-3, 2e-3, 4e-3), workers=1, cpus_per_worker=1), {"CPU": 2.0}) == {"CPU": 1.0}
    assert concurrent_trials(stage(workers=1, cpus_per_worker=1), {"CPU": 3.0}) == 1  # 3 of 4 would fit
    assert concurrent_trials(stage(workers=2, cpus_per_worker=2), {"CPU": 2.0}) == 1  # smaller than one trial


def test_gpu_trials_are_counted_by_gpus():
    config = stage(workers=1, cpus_per_worker=1, use_gpu=True)
    assert concurrent_trials(config, {"CPU": 16.0, "GPU": 1.0}) == 1
    assert concurrent_trials(config, {"CPU": 16.0, "GPU": 4.0}) == 4
    assert worker_resources(config, {"CPU": 16.0, "GPU": 4.0}) == {"CPU": 4.0, "GPU": 4.0}
    assert worker_resources(config, {"CPU": 16.0, "GPU": 3.0}) == {"CPU": 1.0, "GPU": 1.0}


def test_every_trial_checkpoint_is_resumable_so_each_validation_reports_to_tune():
    """A weights-only snapshot reports nothing to Tune: with the runs' resume_every kept,
    ASHA would count a rung every resume_every updates, not every validation."""
    from stages.tune.trials import trial_config
    from stages.train.config import TrainStageConfig

    runs = TrainStageConfig(model=ModelSpec(name="t", family="transformer", preset="tiny"),
                            train=TrainConfig(max_steps=100, valid_every=10, checkpoint_every=5, resume_every=50))
    trial = trial_config(runs, 1e10).train
    assert trial.resume_every is None and trial.checkpoint_every == 10
