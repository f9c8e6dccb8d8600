"""Train stages queued beyond what the cluster can run hold nothing while they wait
(pipeline/admission.py): ``nmt run`` of five train stages on the tests' local Ray
instance (2 CPUs: room for two one-CPU runs), its actors and tasks watched through
Ray's State API while it runs. Its seeds come from ``--set``, as a user tries one more
seed: the other commands then find each seed's model by name (``NAME.s2``)."""

from __future__ import annotations

import threading
import time

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.helpers import shipped_config, write_config

pytestmark = pytest.mark.slow
SEEDS = [1, 2, 3, 4, 5]  # more than twice the two runs there is room for


def live_controllers() -> list:
    from ray.util.state import list_actors

    return list_actors(filters=[("class_name", "=", "TrainController"), ("state", "=", "ALIVE")],
                       raise_on_missing_output=False)


def watch(stop: threading.Event, most: dict) -> None:
    """The most Ray Train controllers and train-stage tasks alive at once."""
    from ray.util.state import list_tasks

    while not stop.wait(0.25):
        controllers = live_controllers()
        stages = [task for task in list_tasks(filters=[("state", "=", "RUNNING")], raise_on_missing_output=False)
                  if task.name.startswith("stage:train/")]
        most["controllers"] = max(most["controllers"], len(controllers))
        most["stage tasks"] = max(most["stage tasks"], len(stages))


def test_queued_train_stages_start_no_task_and_no_controller_until_workers_are_free(tmp_path, multi30k, local_ray,
                                                                                    monkeypatch):
    import ray

    raw = shipped_config("smoke.yaml")
    raw["models"] = [model for model in raw["models"] if model["family"] == "transformer"]
    raw["train"].update(precision="fp32", max_steps=4, warmup_steps=1, valid_every=4, valid_bleu_every=None,
                        checkpoint_every=4, log_every=1)
    raw["train"].pop("max_train_flops", None)
    config = write_config(tmp_path / "queued.yaml", raw)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NMT_MIRROR", str(multi30k))
    monkeypatch.setenv("NMT_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    room = int(ray.cluster_resources()["CPU"])  # one CPU per run
    assert room < len(SEEDS)

    most, stop = {"controllers": 0, "stage tasks": 0}, threading.Event()
    watcher = threading.Thread(target=watch, args=(stop, most), daemon=True)
    watcher.start()
    try:
        result = CliRunner().invoke(app, ["run", str(config), "--until", "train", "--set", f"seeds={SEEDS}"])
    finally:
        stop.set()
        watcher.join()
    assert result.exit_code == 0, result.output[-3000:]
    assert len(list((tmp_path / "artifacts").glob("train/*/*/MANIFEST.json"))) == len(SEEDS)
    # Stage tasks: as many at once as there is room for, never more. Controllers: Ray
    # collects a finished stage's controller a moment after the stage's task returned,
    # while the next stage may already have started its own, so each slot can show a
    # finishing controller beside a starting one; never the queued stages' (without
    # admission all five were alive at once).
    assert 1 <= most["stage tasks"] <= room and 1 <= most["controllers"] <= 2 * room < len(SEEDS), most
    # A finished stage's controller ends with its run: nothing keeps its handle (the
    # stage tasks' processes stay in the instance's pool, idle).
    deadline = time.time() + 30
    while live_controllers() and time.time() < deadline:
        time.sleep(0.5)
    assert not live_controllers()

    # Each seed's model, by name: with the run's --set, and without it (the settings the
    # run recorded); a seed the run did not train is refused, naming those it did.
    for settings in (["--set", f"seeds={SEEDS}"], []):
        translated = CliRunner().invoke(app, ["translate", str(config), *settings, "--model", "transformer_tiny.s2"],
                                        input="A dog runs on the beach.\n")
        assert translated.exit_code == 0 and len(translated.stdout.splitlines()) == 1, translated.output
    refused = CliRunner().invoke(app, ["translate", str(config), "--set", f"seeds={SEEDS}", "--model",
                                       "transformer_tiny.s6"], input="A dog.\n")
    assert refused.exit_code == 2 and "transformer_tiny.s5" in refused.output, refused.output
