"""The train stage for real: Ray Train workers, DeepSpeed engines (gloo on the CPU),
checkpoints, a SIGKILLed run resumed, and all three families through `nmt run`."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeline.core.context import StageContext
from pipeline.core.hardware import CPU_BF16_ENV, detect_device
from pipeline.driver_sigterm import training_workers_below
from stages import train
from stages.shared.inference.model_file import load_model_file
from stages.shared.models.spec import ModelSpec
from stages.train.checkpointer import complete_checkpoints, saved_best
from stages.train.config import TrainConfig, TrainStageConfig
from stages.train.data import TokenizedSplit
from tests.helpers import REPO, kill_everything_below
from tests.trained_models import write_manifest

pytestmark = pytest.mark.slow
# Everything but wall-clock rates must be identical between an interrupted and an
# uninterrupted run.
TIMING_FIELDS = {"tokens_per_second", "flops_per_second", "train_seconds", "mfu"}


def stage_config(family: str = "transformer", **settings) -> TrainStageConfig:
    defaults = dict(workers=1, precision="fp32", max_tokens=600, warmup_steps=20, lr_scale=2.0, max_steps=40,
                    valid_every=10, checkpoint_every=10, keep_checkpoints=3, log_every=2, seed=3)
    return TrainStageConfig(model=ModelSpec(name=f"{family}_tiny", family=family, preset="tiny"),
                            train=TrainConfig(**{**defaults, **settings}))


def run_stage(tokenized: Path, config: TrainStageConfig, output: Path) -> dict:
    output.mkdir(parents=True, exist_ok=True)
    return train.run({"tokenize": tokenized}, config, output, StageContext())


def rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_two_cpu_workers_with_zero2_train_checkpoint_and_lower_the_loss(tokenized, tmp_path, local_ray):
    config = stage_config(workers=2, zero_stage=2, precision="auto", max_steps=60, valid_every=20,
                          checkpoint_every=20, average_last=2)
    metrics = run_stage(tokenized, config, tmp_path / "out")
    curve = [row["train_loss"] for row in rows(tmp_path / "out") if "train_loss" in row]
    assert metrics["steps"] == 60 and len(curve) == 30
    assert sum(curve[-5:]) / 5 < sum(curve[:5]) / 5 - 0.3
    valid = [row["valid_loss"] for row in rows(tmp_path / "out") if "valid_loss" in row]
    assert len(valid) == 3 and valid[-1] < valid[0] < math.log(500)
    checkpoints = complete_checkpoints(tmp_path / "out" / train.RUN_NAME, world_size=2, zero_stage=2)
    assert [c.step for c in checkpoints] == [20, 40, 60]
    report = json.loads((tmp_path / "out" / "train_report.json").read_text())
    assert report["stop_reason"] == "max_steps" and report["averaged_steps"] == [40, 60]
    # Both workers' tokens are counted: about twice one worker's share.
    assert metrics["train_tokens"] == rows(tmp_path / "out")[-1]["train_tokens"]
    assert metrics["train_flops"] > metrics["train_tokens"] * 1e5
    # Where the time went: three validations and checkpoints, 30 logged rows, 60 batches
    # built, and the updates; the parts before the last update fit in its train_seconds.
    parts = {part: metrics[f"seconds_{part}"] for part in ("data", "validation", "checkpoints", "logging",
                                                           "updates")}
    assert all(seconds > 0 for seconds in parts.values()), parts
    assert parts["updates"] > parts["data"] and parts["updates"] < metrics["train_seconds"]


@pytest.mark.parametrize("family", ["rnn", "transformer", "decoder_only"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_family_trains_in_every_precision_this_cpu_runs(tokenized, tmp_path, family, precision):
    """No family may crash inside oneDNN: bf16 trains only where the CPU has it natively
    (the RNN's LSTM has no oneDNN bf16 kernel elsewhere). Where it has not, this test
    skips; the refusal itself is tested in test_pipeline.py. In the stage's own process
    (train.in_process): the worker function and engine are Ray Train's workers' own."""
    if precision == "bf16" and not detect_device("cpu").bf16:
        pytest.skip(f"this CPU has no native bf16: {detect_device('cpu').why}")
    metrics = run_stage(tokenized, stage_config(family, precision=precision, max_steps=4, valid_every=4,
                                                checkpoint_every=4, log_every=1, in_process=True), tmp_path / "out")
    losses = [row["train_loss"] for row in rows(tmp_path / "out") if "train_loss" in row]
    assert metrics["steps"] == 4 and len(losses) == 4 and all(math.isfinite(loss) for loss in losses)
    device = detect_device("cpu")
    assert metrics["precision"] == precision and metrics["device_name"] == device.name
    assert metrics["device_capability"] == device.capability and metrics["threads_per_worker"] == 1
    # MFU against the peak this worker measured in the same precision and thread count.
    assert metrics["peak_source"] == "measured" and f"{precision} matmul probe" in metrics["peak_detail"]
    assert metrics["mfu"] == pytest.approx(metrics["flops_per_second"] / metrics["peak_flops_per_worker"])
    assert 0 < metrics["mfu"] < 1.5
    report = json.loads((tmp_path / "out" / "train_report.json").read_text())
    assert report["metrics"]["precision"] == precision


def test_auto_trains_in_fp32_when_the_cpu_is_told_it_lacks_bf16(tokenized, tmp_path):
    """What an AVX2-only CPU does, on any CPU: the worker resolves auto to fp32 itself.
    A process of its own that sees the environment variable, training in the stage's
    process (the worker function is Ray Train's workers'). On a CPU without native bf16
    the consolidated-weights test's auto run shows this already."""
    if not detect_device("cpu").bf16:
        pytest.skip("this CPU lacks native bf16: test_consolidated_weights_load_without_deepspeed_and_match_the_engine"
                    "[auto-2-2] trains auto in fp32 here")
    config = stage_config("rnn", precision="auto", max_steps=2, valid_every=2, checkpoint_every=2, in_process=True)
    env = {**os.environ, CPU_BF16_ENV: "0"}
    subprocess.run([sys.executable, "-c", VICTIM_WITHOUT_RAY, config.model_dump_json(), str(tokenized),
                    str(tmp_path)], cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    metrics = json.loads((tmp_path / "train_report.json").read_text())["metrics"]
    assert metrics["precision"] == "fp32" and metrics["steps"] == 2


@pytest.mark.parametrize("precision, zero_stage, workers", [("auto", 2, 2), ("fp32", 3, 2), ("fp32", 0, 1)])
def test_consolidated_weights_load_without_deepspeed_and_match_the_engine(tokenized, tmp_path, local_ray,
                                                                          monkeypatch, precision, zero_stage, workers):
    """ZeRO 1-3 weights come from the optimizer's fp32 partitions (zero_to_fp32), stage
    0's from the model states file: either way they must be the engine's weights. The
    run validates at update 10, so under ZeRO-3 every worker must join the gather of the
    best weights (rank 0 alone would wait for the others for ever)."""
    # One worker trains in the stage's process (train.in_process): the same engine and
    # checkpoint, without Ray Train's start.
    config = stage_config(workers=workers, zero_stage=zero_stage, precision=precision, max_steps=10,
                          checkpoint_every=10, in_process=workers == 1)
    metrics = run_stage(tokenized, config, tmp_path / "out")
    # auto resolves in the worker: fp32 without native bf16, else the faster of the two, measured.
    resolved = {"bf16", "fp32"} if detect_device("cpu").bf16 else {"fp32"}
    assert metrics["precision"] in resolved if precision == "auto" else metrics["precision"] == precision
    model, info = load_model_file(write_manifest(tmp_path / "out") / "model.pt")  # as the store commits it
    assert info["info"]["averaged_steps"] == [10]
    last = complete_checkpoints(tmp_path / "out" / train.RUN_NAME, workers, zero_stage)[-1]
    if zero_stage == 3:
        # No engine of one process loads a checkpoint two ZeRO-3 ranks wrote. The best
        # weights the workers gathered live at update 10 (the run's one validation) are
        # the engine's, by a path that shares nothing with zero_to_fp32's reading of files.
        best = saved_best(last)
        assert best and all(torch.allclose(model.state_dict()[name], tensor, atol=1e-6) for name, tensor in best.items())
        return
    checkpoint = last.path
    batch = TokenizedSplit(tokenized, "valid").batch(torch.arange(8).numpy())
    with torch.no_grad():
        ours = model(batch.src, batch.tgt_in)
    engine_model, _ = load_model_file(tmp_path / "out" / "model.pt")  # same architecture, weights replaced
    for parameter in engine_model.parameters():
        torch.nn.init.zeros_(parameter)
    theirs = _engine_logits(engine_model, checkpoint, batch, monkeypatch)
    assert torch.allclose(ours, theirs, atol=1e-5)


def _engine_logits(model, checkpoint: Path, batch, monkeypatch):
    """Logits from a DeepSpeed engine that loads the checkpoint itself (this process alone)."""
    import deepspeed

    from tests.train_loops import single_process_distributed

    single_process_distributed(monkeypatch, "gloo")
    engine, *_ = deepspeed.initialize(model=model, config={"train_micro_batch_size_per_gpu": 1})
    engine.load_checkpoint(str(checkpoint), tag="deepspeed", load_module_only=True,
                           load_optimizer_states=False, load_lr_scheduler_states=False)
    engine.eval()
    with torch.no_grad():
        return engine(batch.src, batch.tgt_in)


# The stage run in a process of its own, from its config (JSON), tokenize artifact and
# output directory: as is (trained in that process, train.in_process), or VICTIM, which
# first starts a Ray instance there for Ray Train.
VICTIM_WITHOUT_RAY = """
import sys
from pathlib import Path
from stages import train
from stages.train.config import TrainStageConfig
from pipeline.core.context import StageContext

config = TrainStageConfig.model_validate_json(sys.argv[1])
train.run({"tokenize": Path(sys.argv[2])}, config, Path(sys.argv[3]), StageContext())
"""

VICTIM = """
import ray
from pipeline.runner import point_state_api_at_own_dashboard

# Ray gives a new node's raylet a fixed 30 s to register (ray/_private/node.py); on two
# cores loaded by the other test worker's cluster it once missed that: a second start.
for attempt in (1, 2):
    try:
        ray.init(address="local", num_cpus=1, dashboard_port=point_state_api_at_own_dashboard(), log_to_driver=False)
        break
    except Exception as error:
        if attempt == 2 or "timed out during startup" not in str(error):
            raise
        ray.shutdown()
""" + VICTIM_WITHOUT_RAY


@pytest.fixture(scope="module")
def uninterrupted(tokenized, tmp_path_factory, local_ray) -> tuple[TrainStageConfig, list[dict]]:
    """A fp32 run that nothing interrupts: the curve the interrupted runs must follow.
    It logs every 3 updates, so each checkpoint (every 10) falls between two rows: the
    resumed run's next row must cover the updates before the checkpoint too."""
    config = stage_config(max_steps=40, checkpoint_every=10, log_every=3, max_failures=1)
    output = tmp_path_factory.mktemp("uninterrupted")
    run_stage(tokenized, config, output)
    return config, rows(output)


def start_in_a_new_process(config: TrainStageConfig, tokenized: Path, output: Path) -> subprocess.Popen:
    """The stage in its own process group, its output in ``output/../<name>.log`` for a failure's message."""
    output.mkdir(parents=True, exist_ok=True)
    log = (output.parent / f"{output.name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-c", VICTIM, config.model_dump_json(), str(tokenized), str(output)],
                            cwd=REPO, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)


def log_tail(output: Path, lines: int = 60) -> str:
    return "\n".join((output.parent / f"{output.name}.log").read_text(errors="replace").splitlines()[-lines:])


def wait_for_a_checkpoint(process: subprocess.Popen, output: Path) -> None:
    deadline = time.time() + 300
    while not complete_checkpoints(output / train.RUN_NAME, 1, 0) and time.time() < deadline:
        assert process.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.05)


def registered_checkpoint(output: Path) -> str | None:
    """The checkpoint Ray Train would restart from, per its run snapshot."""
    try:
        snapshot = json.loads((output / train.RUN_NAME / "checkpoint_manager_snapshot.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return (snapshot.get("latest_checkpoint_result") or {}).get("checkpoint_dir_name")


def the_worker_once_a_checkpoint_is_registered(run: subprocess.Popen, output: Path):
    """The run's one Ray Train worker process, once Ray Train has registered a checkpoint
    to restart from (a moment after its files are on disk)."""
    deadline = time.time() + 300
    while not registered_checkpoint(output) and time.time() < deadline:
        assert run.poll() is None, "the run ended before Ray Train registered a checkpoint"
        time.sleep(0.05)
    workers = training_workers_below(run.pid)
    assert len(workers) == 1
    return workers[0]


def assert_same_curve(expected: list[dict], got: list[dict]) -> None:
    assert [row["step"] for row in got] == [row["step"] for row in expected]
    for want, row in zip(expected, got):
        assert set(want) == set(row)
        for name in set(want) - TIMING_FIELDS:
            assert row[name] == pytest.approx(want[name], rel=1e-5, abs=1e-5), (want["step"], name)


def test_a_killed_run_resumes_from_its_checkpoint_and_follows_the_same_curve(tokenized, tmp_path, uninterrupted):
    config, expected = uninterrupted
    killed = tmp_path / "killed"
    victim = start_in_a_new_process(config, tokenized, killed)
    wait_for_a_checkpoint(victim, killed)
    kill_everything_below(victim)
    saved = complete_checkpoints(killed / train.RUN_NAME, 1, 0)
    assert saved and saved[-1].step < 40 and not (killed / "model.pt").exists()

    metrics = run_stage(tokenized, config, killed)
    assert metrics["restarts"] == 1 and metrics["steps"] == 40
    assert_same_curve(expected, rows(killed))


def test_a_crashed_worker_is_restarted_by_ray_train_from_the_last_checkpoint(tokenized, tmp_path, uninterrupted):
    config, expected = uninterrupted
    output = tmp_path / "out"
    run = start_in_a_new_process(config, tokenized, output)
    the_worker_once_a_checkpoint_is_registered(run, output).kill()
    assert run.wait(timeout=300) == 0, log_tail(output)
    report = json.loads((output / "train_report.json").read_text())
    assert report["metrics"]["restarts"] == 1 and report["metrics"]["steps"] == 40
    assert_same_curve(expected, rows(output))


def test_each_seed_is_its_own_artifact_and_a_seed_trained_before_is_a_cache_hit(tokenized, tmp_path, local_ray):
    """``seeds: [1, 2]`` trains each model twice, under two keys, with different
    initial weights and batches; growing the list to [2, 1, 3] reuses both."""
    from pipeline.core.artifacts import ArtifactState, ArtifactStore
    from pipeline.config import ExperimentConfig
    from pipeline.graph import plan
    from tests.helpers import shipped_config

    raw = shipped_config("smoke.yaml")
    raw["models"] = [model for model in raw["models"] if model["family"] == "transformer"]
    raw["train"].update(precision="fp32", max_steps=6, warmup_steps=2, valid_every=3, checkpoint_every=3, log_every=1,
                        in_process=True)
    raw["train"].pop("max_train_flops", None)
    store = ArtifactStore(str(tmp_path / "artifacts"))

    def train_runs(seeds: list[int]) -> dict:
        config = ExperimentConfig.model_validate({**raw, "seeds": seeds})
        return {item.stage.name: item for item in plan(config, store) if item.stage.group == "train"}

    first = train_runs([1, 2])
    assert list(first) == ["train/transformer_tiny.s1", "train/transformer_tiny.s2"]
    assert first["train/transformer_tiny.s1"].key != first["train/transformer_tiny.s2"].key
    curves = {}
    for name, item in first.items():
        staging = store.staging_dir(name, item.key)
        run_stage(tokenized, item.stage.config_of(ExperimentConfig.model_validate({**raw, "seeds": [1, 2]})),
                  staging)
        curves[name] = [row["train_loss"] for row in rows(staging) if "train_loss" in row]
        store.commit(name, item.key, staging, {"config": {}, "metrics": {}})
    assert curves["train/transformer_tiny.s1"] != curves["train/transformer_tiny.s2"]

    grown = train_runs([2, 1, 3])
    assert {name: item.key for name, item in grown.items() if name in first} == \
           {name: item.key for name, item in first.items()}
    assert {name: item.status.state for name, item in grown.items()} == {
        "train/transformer_tiny.s2": ArtifactState.CACHED, "train/transformer_tiny.s1": ArtifactState.CACHED,
        "train/transformer_tiny.s3": ArtifactState.MISSING}


def test_a_cosine_over_a_flops_budget_decays_by_the_flops_spent_and_ends_at_the_budget(tokenized, tmp_path,
                                                                                       local_ray):
    """The engine's rate follows the FLOPs each update counted (summed over both
    workers), from the warmup's peak down to ``min_lr`` where the budget runs out."""
    from stages.train.plan import as_configured
    from stages.train.schedule import Spent, learning_rate

    config = stage_config(workers=2, schedule="cosine", lr=3e-3, min_lr=1e-4, warmup_steps=5, max_steps=None,
                          max_train_flops=4e11, log_every=1, valid_every=100, checkpoint_every=100)
    metrics = run_stage(tokenized, config, tmp_path / "out")
    logged = [row for row in rows(tmp_path / "out") if "lr" in row]
    report = json.loads((tmp_path / "out" / "train_report.json").read_text())
    assert report["stop_reason"] == "max_train_flops" and len(logged) == metrics["steps"] >= 15
    width = 128  # the cosine does not depend on the model's width
    run = as_configured(config.train)
    before = Spent(0, 0.0, 0.0)
    for row in logged:
        # A row is written after its update; the rate it shows is the next update's,
        # which DeepSpeed set from what the updates before this one had spent.
        assert row["lr"] == pytest.approx(learning_rate(row["step"] + 1, config.train, run, width, before), rel=1e-6)
        before = Spent(row["step"], row["train_flops"], row["train_tokens"])
    rates = [row["lr"] for row in logged]
    assert rates.index(max(rates)) == 3 and max(rates) == pytest.approx(3e-3)  # update 5, the warmup's last
    assert rates[3:] == sorted(rates[3:], reverse=True) and rates[-1] < 3e-4


def test_a_budget_branched_from_a_chain_of_stable_segments_trains_as_the_budget_alone(tokenized, tmp_path,
                                                                                      local_ray):
    """wsd over 40 updates, decaying over its last quarter, trained alone; and as the sweep
    trains it: a segment stopping where a 20-update budget's decay begins (15), the next
    continuing it to where this budget's does (30), and the branch decaying from there.
    The same updates, data order and rates: the same curve and final weights. Each run in
    its stage's own process, as the frontier study trains its branches."""
    from stages.train.progress import STABLE_PHASE_END

    def config(steps: int, **stage) -> TrainStageConfig:
        base = stage_config(schedule="wsd", lr=2e-3, min_lr=1e-5, warmup_steps=5, decay_fraction=0.25,
                            max_steps=steps, valid_every=5, checkpoint_every=5, log_every=1, in_process=True)
        return base.model_copy(update=stage)

    def continued(name: str, config: TrainStageConfig, start: Path, output: Path) -> dict:
        output.mkdir(parents=True)
        return train.run({"tokenize": tokenized, name: start}, config, output, StageContext())

    alone = tmp_path / "alone"
    run_stage(tokenized, config(40), alone)
    first, second, branch = tmp_path / "first", tmp_path / "second", tmp_path / "branch"
    run_stage(tokenized, config(20, until_decay=True), first)
    continued("train/first", config(40, until_decay=True, start_from="train/first"), first, second)
    metrics = continued("train/second", config(40, start_from="train/second"), second, branch)

    assert [json.loads((path / "train_report.json").read_text())["stop_reason"] for path in (first, second)] == \
        [STABLE_PHASE_END, STABLE_PHASE_END]
    assert metrics["steps"] == 40 and metrics["continued_at_step"] == 30 and metrics["stop_reason"] == "max_steps"
    assert metrics["continued_from"] == "train/second" and metrics["own_train_flops"] < metrics["train_flops"] / 3
    assert_same_curve(rows(alone), rows(branch))
    rates = {row["step"]: row["lr"] for row in rows(branch) if "lr" in row}
    assert rates[29] == rates[5] == 2e-3 and rates[30] < 2e-3  # stable to the decay, which update 31 begins
    (expected, _), (got, _) = (load_model_file(write_manifest(alone) / "model.pt"),
                               load_model_file(write_manifest(branch) / "model.pt"))
    for name, tensor in expected.state_dict().items():
        assert torch.allclose(got.state_dict()[name], tensor, atol=1e-6), name


def test_a_branch_whose_segment_stopped_early_is_refused(tokenized, tmp_path, local_ray):
    """A segment that stopped on another budget (its wall time, here its max_steps) is not
    the stable phase the budget shares: the branch fails, naming both and leaving nothing."""
    segment, branch = tmp_path / "segment", tmp_path / "branch"
    run_stage(tokenized, stage_config(schedule="wsd", lr=2e-3, warmup_steps=2, max_steps=4, in_process=True),
              segment)
    config = stage_config(schedule="wsd", lr=2e-3, warmup_steps=2, max_steps=40, in_process=True).model_copy(
        update={"start_from": "train/segment"})
    branch.mkdir()
    with pytest.raises(Exception, match="train/segment stopped at 'max_steps' after 4 updates, not where its decay"):
        train.run({"tokenize": tokenized, "train/segment": segment}, config, branch, StageContext())
    assert not (branch / "model.pt").exists()


def test_a_sigtermed_worker_checkpoints_the_update_under_way_and_the_run_resumes_from_it(tokenized, tmp_path,
                                                                                          uninterrupted, monkeypatch):
    """Preemption (stages/train/preemption.py): SIGTERM to the training worker after its
    checkpoint at update 10; it stops after the update under way with a checkpoint of
    it, and Ray Train's next attempt resumes there: no update lost, the same curve. The
    stage's marks (NMT_TIMELINE) say which update each attempt reached."""

    timeline = tmp_path / "timeline.jsonl"
    monkeypatch.setenv("NMT_TIMELINE", str(timeline))
    config, expected = uninterrupted
    output = tmp_path / "out"
    run = start_in_a_new_process(config, tokenized, output)
    the_worker_once_a_checkpoint_is_registered(run, output).send_signal(signal.SIGTERM)
    assert run.wait(timeout=300) == 0, log_tail(output)
    events = [json.loads(line)["event"] for line in timeline.read_text().splitlines()]
    assert "preemption checkpointed" in events, events
    before = events[:events.index("preemption checkpointed")]
    last = max(int(event.split()[1]) for event in before if event.startswith("update "))
    (resumed,) = [int(event.split()[-1]) for event in events if event.startswith("resumed at update")]
    assert 10 < resumed < 40  # after the periodic checkpoint, not from it
    assert last - resumed == 0  # no update lost
    report = json.loads((output / "train_report.json").read_text())
    assert report["metrics"]["restarts"] == 1 and report["metrics"]["steps"] == 40
    assert_same_curve(expected, rows(output))


def test_in_process_training_follows_ray_train_s_curve_and_keeps_as_many_checkpoints(tokenized, tmp_path,
                                                                                      uninterrupted):
    """train.in_process (stages/train/in_process.py): the same updates as the Ray Train
    worker group's run, checkpoints persisted in the same layout, the newest
    keep_checkpoints kept, and nothing Ray Train writes (its run snapshot)."""
    config, expected = uninterrupted
    metrics = run_stage(tokenized, in_process(config), tmp_path)
    assert metrics["steps"] == 40 and metrics["restarts"] == 0
    assert_same_curve(expected, rows(tmp_path))
    kept = complete_checkpoints(tmp_path / train.RUN_NAME, 1, 0)
    assert [checkpoint.step for checkpoint in kept] == [20, 30, 40]
    assert not (tmp_path / train.RUN_NAME / "checkpoint_manager_snapshot.json").exists()


def test_weights_only_snapshots_between_resumable_checkpoints_average_into_the_same_model(tokenized, tmp_path,
                                                                                           local_ray):
    """train.resume_every: the checkpoints between two resumable ones are snapshots of
    the weights, a fraction of a checkpoint's size, averaged as checkpoints are; curve
    and averaged model are those of a run whose every checkpoint is resumable (why the
    setting is not part of the key)."""
    settings = dict(in_process=True, max_steps=20, checkpoint_every=5, keep_checkpoints=3, average_last=3)
    plain, snapshots = tmp_path / "plain", tmp_path / "snapshots"
    run_stage(tokenized, stage_config(**settings), plain)
    run_stage(tokenized, stage_config(resume_every=10, **settings), snapshots)
    assert_same_curve(rows(plain), rows(snapshots))
    kept = complete_checkpoints(snapshots / train.RUN_NAME, 1, 0)
    assert [(c.step, c.snapshot) for c in kept] == [(5, True), (10, False), (15, True), (20, False)]
    assert [c.step for c in complete_checkpoints(plain / train.RUN_NAME, 1, 0)] == [10, 15, 20]
    models = [load_model_file(write_manifest(output) / "model.pt") for output in (plain, snapshots)]
    assert models[0][1]["info"]["averaged_steps"] == models[1][1]["info"]["averaged_steps"] == [10, 15, 20]
    for (name, want), got in zip(models[0][0].state_dict().items(), models[1][0].state_dict().values()):
        assert torch.allclose(want, got, atol=1e-6), name

    def size(directory: Path) -> int:
        return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())

    assert size(kept[2].path) < 0.5 * size(kept[3].path)  # the final checkpoint keeps Adam's moments


def test_a_compiled_run_reports_the_graphs_it_compiled(tokenized, tmp_path, monkeypatch):
    """train.compile (traced by the "eager" backend: dynamo's graphs, no code generated):
    training's graph and the final validation's, the only one, both in train_report."""
    import torch.fx.experimental._config as symbolic_shapes

    from stages.train import engine

    monkeypatch.setattr(engine, "COMPILE_BACKEND", "eager")
    config = stage_config(in_process=True, compile=True, max_steps=6, warmup_steps=2, valid_every=100,
                          checkpoint_every=100, average_last=1)
    duck_shape = symbolic_shapes.use_duck_shape  # compile_in_place sets it for the process
    try:
        metrics = run_stage(tokenized, config, tmp_path)
    finally:
        symbolic_shapes.use_duck_shape = duck_shape
        torch._dynamo.reset()
    assert metrics["steps"] == 6 and metrics["compiled_graphs"] == 2


def in_process(config: TrainStageConfig) -> TrainStageConfig:
    return config.model_copy(update={"train": config.train.model_copy(update={"in_process": True})})


def test_an_in_process_run_killed_or_sigtermed_resumes_from_its_checkpoint_on_the_same_curve(tokenized, tmp_path,
                                                                                            uninterrupted):
    """A SIGKILLed in-process run leaves complete checkpoints only; a SIGTERMed one
    checkpoints the update under way and its process ends; the next run resumes each
    from its newest checkpoint and follows the uninterrupted curve."""
    config, expected = uninterrupted
    config = in_process(config)
    for sent in (signal.SIGKILL, signal.SIGTERM):
        output = tmp_path / sent.name
        victim = start_in_a_new_process(config, tokenized, output)
        wait_for_a_checkpoint(victim, output)
        os.kill(victim.pid, sent)  # the stage trains in this very process
        # Killed by the signal, or ended by Ray's SIGTERM handler (behind ours) with its number.
        assert victim.wait(timeout=120) in (-sent, sent), log_tail(output)
        saved = complete_checkpoints(output / train.RUN_NAME, 1, 0)
        assert saved and saved[-1].step < 40 and not (output / "model.pt").exists()
        if sent == signal.SIGTERM:  # the loop stopped at an update's end, not the process mid-update
            assert "SIGTERM: finishing the update under way" in log_tail(output), log_tail(output)
        metrics = run_stage(tokenized, config, output)
        assert metrics["restarts"] == 1 and metrics["steps"] == 40
        assert_same_curve(expected, rows(output))
