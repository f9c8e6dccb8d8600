"""Which worker-holding stages may start (pipeline/admission.py)."""

from __future__ import annotations

from pipeline.admission import Admission


def test_stages_are_admitted_while_their_claims_fit_and_again_once_one_ends():
    admission = Admission({"CPU": 2.0, "GPU": 1.0})
    assert admission.admits({"CPU": 1.0})
    admission.hold("train/a", {"CPU": 1.0})
    assert admission.admits({"CPU": 1.0}) and not admission.admits({"CPU": 2.0})
    admission.hold("train/b", {"CPU": 1.0})
    assert not admission.admits({"CPU": 1.0}) and admission.running() == 2
    admission.release("train/a")
    assert admission.admits({"CPU": 1.0})


def test_a_resource_the_cluster_lacks_waits_for_an_empty_cluster_then_starts_alone():
    admission = Admission({"CPU": 2.0})
    admission.hold("train/cpu", {"CPU": 1.0})
    assert not admission.admits({"CPU": 1.0, "GPU": 1.0})
    admission.release("train/cpu")
    assert admission.admits({"CPU": 8.0, "GPU": 1.0})  # too big for the cluster: Ray holds it, as before


def test_runs_on_a_share_of_a_gpu_are_admitted_until_the_shares_fill_it():
    """train.gpus_per_worker 0.125: eight runs of one worker train on one GPU at once,
    the ninth waits for one of them (a 16-CPU, 1-GPU node, as Ray reports it)."""
    import pytest

    from stages.shared.models.spec import ModelSpec
    from stages.train import worker_resources
    from stages.train.config import TrainConfig, TrainStageConfig

    config = TrainStageConfig(model=ModelSpec(name="t", family="transformer", preset="w8"),
                              train=TrainConfig(max_steps=10, use_gpu=True, gpus_per_worker=0.125))
    cluster = {"CPU": 16.0, "GPU": 1.0}
    claim = worker_resources(config, cluster)
    assert claim == {"CPU": 1.0, "GPU": 0.125}
    admission = Admission(cluster)
    for run in range(8):
        assert admission.admits(claim), run
        admission.hold(f"train/t.{run}", claim)
    assert not admission.admits(claim)
    admission.release("train/t.3")
    assert admission.admits(claim)
    # A whole GPU per worker otherwise; a share needs a GPU and a run of one worker.
    assert worker_resources(config.model_copy(update={"train": TrainConfig(max_steps=10, use_gpu=True)}),
                            cluster)["GPU"] == 1.0
    with pytest.raises(ValueError, match="gpus_per_worker is a share of a GPU: it needs use_gpu: true"):
        TrainConfig(max_steps=10, gpus_per_worker=0.5)
    with pytest.raises(ValueError, match="NCCL cannot join two workers on one GPU"):
        TrainConfig(max_steps=10, use_gpu=True, workers=2, gpus_per_worker=0.5)
