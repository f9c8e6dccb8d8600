"""train.in_process's own rules: which runs it takes, what an attempt's failure costs,
and that it is left out of artifact keys (the same run either way)."""

from __future__ import annotations

import pytest

from pipeline.core.section import key_exclusions
from stages.shared.models.spec import ModelSpec
from stages.train import in_process, preemption, task_cpus
from stages.train.config import TrainConfig, TrainStageConfig


def stage_config(**train) -> TrainStageConfig:
    return TrainStageConfig(model=ModelSpec(name="t", family="transformer", preset="tiny"),
                            train=TrainConfig(max_steps=10, **train))


@pytest.mark.parametrize("settings, in_process", [({}, True), ({"workers": 2}, False), ({"use_gpu": True}, False)])
def test_only_a_run_of_one_cpu_worker_trains_in_its_stage_s_process(settings, in_process):
    """A config that asks for it still trains on GPUs or several workers, through Ray Train."""
    training = TrainConfig(max_steps=10, in_process=True, **settings)
    assert training.trains_in_process() is in_process
    assert task_cpus(TrainStageConfig(model=ModelSpec(name="t", family="transformer", preset="tiny"),
                                      train=training)) == (1.0 if in_process else 0.0)


def test_in_process_is_not_in_the_key_and_its_task_holds_the_worker_s_cpus():
    plain, local = stage_config(), stage_config(in_process=True, cpus_per_worker=2)
    assert key_exclusions(local) == {"train": {"in_process": True, "gpus_per_worker": True, "resume_every": True}}
    exclude = key_exclusions(local)
    assert (plain.model_dump(mode="json", exclude=exclude)["train"]
            == {**local.model_dump(mode="json", exclude=exclude)["train"], "cpus_per_worker": 1})
    assert task_cpus(plain) == 0.0 and task_cpus(local) == 2.0


class Worker:
    """``train_worker`` that fails its first ``failures`` attempts with ``error``."""

    def __init__(self, failures: int, error: Exception):
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self, loop_config: dict) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error


@pytest.fixture
def no_process_group(monkeypatch):
    monkeypatch.setattr(in_process, "_one_process_group", lambda: None)
    monkeypatch.setattr(preemption, "install", lambda: None)


@pytest.mark.parametrize("failures, max_failures, calls, raises", [
    (0, 0, 1, False), (2, 2, 3, False), (3, 2, 3, True), (5, -1, 6, False)])
def test_a_failed_attempt_is_retried_up_to_max_failures(monkeypatch, no_process_group, failures, max_failures,
                                                        calls, raises):
    worker = Worker(failures, RuntimeError("worker crashed"))
    monkeypatch.setattr(in_process, "train_worker", worker)
    if raises:
        with pytest.raises(RuntimeError, match="worker crashed"):
            in_process.fit(None, None, max_failures)
    else:
        in_process.fit(None, None, max_failures)
    assert worker.calls == calls


def test_a_preempted_attempt_is_not_retried_and_ends_the_process(monkeypatch, no_process_group):
    worker, ended = Worker(1, preemption.Preempted("SIGTERM")), []
    monkeypatch.setattr(in_process, "train_worker", worker)
    monkeypatch.setattr(preemption, "end_process", lambda: ended.append(True))
    with pytest.raises(preemption.Preempted):
        in_process.fit(None, None, 5)
    assert worker.calls == 1 and ended == [True]
