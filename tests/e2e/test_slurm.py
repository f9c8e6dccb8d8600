"""``sbatch cluster/slurm.sbatch`` on a real Slurm (tests/slurm_cluster.py), on an S3
root (the loopback SeaweedFS): a job given Slurm's early signal while it trains, then
one ``scancel``led, then one that runs the smoke graph to its report, each resuming the
training from the store, under the same keys. After each job, nothing of its Ray is
left running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.graph import plan
from tests.helpers import REPO, kill_everything_below, processes_naming, set_options, smoke_briefly
from tests.s3_server import free_port
from tests.slurm_cluster import SlurmCluster, available

pytestmark = pytest.mark.slow
SMOKE = REPO / "configs" / "smoke.yaml"
FAST = smoke_briefly(40, one_model=True)  # the job is about launching, not about training


@pytest.fixture(scope="module")
def slurm():
    reason = available()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(cpus=os.cpu_count()).start()
    yield cluster
    left = cluster.stop()
    assert not left, f"Slurm or MUNGE processes outlived the cluster: {left}"


def submit(slurm: SlurmCluster, root: str, workdir: Path, env: dict[str, str]) -> str:
    """The smoke graph as a one-node job: the script's directives for a GPU cluster
    overridden on the command line, as a user of a CPU partition would."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=1", f"--cpus-per-task={os.cpu_count()}",
               "--gpus-per-node=0", "--time=30", f"--output={workdir}/job-%j.log", str(REPO / "cluster" / "slurm.sbatch"),
               str(SMOKE), root, *set_options(FAST)]
    done = subprocess.run(command, cwd=workdir, env={**slurm.env, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_env(tmp_path: Path, multi30k: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # nmt and ray, as the job's shell finds them
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "NMT_MIRROR": str(multi30k),
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "NMT_RAY_PORT": str(free_port()),
            "NMT_READY_TIMEOUT": "300", "PYTHONPATH": str(REPO), **(extra or {})}


def job_log(workdir: Path, job: str) -> str:
    path = workdir / f"job-{job}.log"
    return path.read_text(errors="replace") if path.is_file() else ""


def ray_processes_of(job: str) -> list[str]:
    """Processes of the job's Ray (its temp dir is in their command lines) still running."""
    return processes_naming(f"{os.environ.get('RAY_TMPDIR', '/tmp')}/ray-{job}/")


def wait_gone(slurm: SlurmCluster, job: str, workdir: Path, timeout: float = 900) -> None:
    try:
        slurm.wait_for_state(job, {""}, timeout)
    except TimeoutError:
        pytest.fail(f"job {job} still {slurm.job_state(job)!r} after {timeout:.0f} s:\n{job_log(workdir, job)[-4000:]}")


def graph_state(root: str, env: dict[str, str]) -> dict[str, tuple[str, ArtifactState]]:
    config = load_config(SMOKE, FAST)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        store = ArtifactStore(root)
        return {item.stage.name: (item.key, item.status.state) for item in plan(config, store)}


def marks(timeline: Path) -> list[tuple[str, str]]:
    """(stage, event) of each mark the job's processes left (pipeline/core/timeline.py)."""
    if not timeline.is_file():
        return []
    lines = [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]
    return [(line["stage"], line["event"]) for line in lines]


@pytest.fixture
def bystander(tmp_path):
    """Another job's training on the node (tests/bystander_training.py): the path it
    writes if it is ever sent SIGTERM, and its process."""
    marker = tmp_path / "bystander-signalled"
    temp_dir = tempfile.mkdtemp(prefix="rb-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    process = subprocess.Popen([sys.executable, "-m", "tests.bystander_training", str(marker), temp_dir], cwd=REPO,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout.readline().startswith("ready"), "the bystander's Ray did not start"
    yield marker, process
    kill_everything_below(process)
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_job_signalled_then_one_cancelled_resume_from_the_s3_store_with_the_same_keys(slurm, s3, multi30k,
                                                                                        tmp_path, bystander):
    """Three jobs on one S3 root. The first gets the signal the script asks Slurm for
    before its time limit (``--signal=B:USR1@120``, sent here with ``scancel
    --signal=USR1 --batch``): its training checkpoints the update under way and the job
    ends by itself, and another training on the node (``bystander``) is never signalled. The second resumes there, with no update lost, and is ``scancel``led
    past its next checkpoint. The third resumes from the store and completes the graph,
    under the keys the first job planned."""
    root = s3.uri("slurm/smoke")
    timeline = tmp_path / "timeline.jsonl"  # every process of the jobs marks its stage's updates here
    env = job_env(tmp_path, multi30k, {**s3.env(), "NMT_TIMELINE": str(timeline)})
    workdir = tmp_path / "job"

    def wait_for_mark(job: str, found, what: str, timeout: float = 600):
        deadline = time.time() + timeout
        while not (value := found()):
            assert slurm.job_state(job), f"job {job} ended before {what}:\n{job_log(workdir, job)[-4000:]}"
            assert time.time() < deadline, f"no {what} in {timeout:.0f} s:\n{job_log(workdir, job)[-4000:]}"
            time.sleep(0.5)
        return value

    def resumed_at(stage: str, since: int) -> list[int]:
        """The updates ``stage`` resumed at, in the marks after the first ``since``."""
        return [int(event.split()[-1]) for name, event in marks(timeline)[since:]
                if name == stage and event.startswith("resumed at update")]

    first = submit(slurm, root, workdir, env)
    training = wait_for_mark(first, lambda: next((stage for stage, event in marks(timeline)
                                                  if stage.startswith("train/") and event == "update 3"), None),
                             "a training's third update")
    slurm.run("scancel", "--signal=USR1", "--batch", first)
    wait_gone(slurm, first, workdir, timeout=120)  # it ends by itself: no SIGKILL comes
    events = [event for stage, event in marks(timeline) if stage == training]
    assert "preemption checkpointed" in events, (training, events, job_log(workdir, first)[-4000:])
    # Ray Train may have begun another attempt before the driver ended: it too was
    # signalled, so the job's last update is the one its last checkpoint holds.
    last = len(events) - 1 - events[::-1].index("preemption checkpointed")
    updates = [int(event.split()[1]) for event in events if event.startswith("update ")]
    checkpointed = max(int(event.split()[1]) for event in events[:last] if event.startswith("update "))
    assert max(updates) == checkpointed, events  # no update past it
    assert "stopped by SIGTERM" in job_log(workdir, first), job_log(workdir, first)[-4000:]
    marker, bystanding = bystander  # the handler signalled this job's workers alone
    assert not marker.exists() and bystanding.poll() is None, job_log(workdir, first)[-4000:]
    time.sleep(2)
    assert not ray_processes_of(first), ray_processes_of(first)
    planned = graph_state(root, s3.env())
    assert planned[training][1] != ArtifactState.CACHED  # it was stopped short

    second, since = submit(slurm, root, workdir, env), len(marks(timeline))
    wait_for_mark(second, lambda: resumed_at(training, since), f"{training} resuming")
    assert resumed_at(training, since) == [checkpointed]  # no update lost
    # Past its next periodic checkpoint (every 10 updates), then cancelled outright.
    wait_for_mark(second, lambda: (training, f"update {(checkpointed // 10 + 1) * 10 + 2}") in marks(timeline),
                  f"{training} past its next checkpoint")
    slurm.run("scancel", second)
    wait_gone(slurm, second, workdir, timeout=120)
    time.sleep(2)
    assert not ray_processes_of(second), ray_processes_of(second)

    third, since = submit(slurm, root, workdir, env), len(marks(timeline))
    wait_gone(slurm, third, workdir)
    after = graph_state(root, s3.env())
    assert "1 of 1 Ray nodes alive" in job_log(workdir, third)  # it waited for its node, as each job does
    assert "report" in after  # the graph to its report
    assert all(state == ArtifactState.CACHED for _, state in after.values()), job_log(workdir, third)[-4000:]
    assert {name: key for name, (key, _) in after.items()} == {name: key for name, (key, _) in planned.items()}
    assert "cache hit" in job_log(workdir, third)  # what the jobs before committed was not computed again
    resumed = resumed_at(training, since)
    assert resumed and resumed[0] >= (checkpointed // 10 + 1) * 10, marks(timeline)[since:][:20]
    assert not ray_processes_of(third)
