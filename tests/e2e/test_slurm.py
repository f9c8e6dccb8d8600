"""``sbatch cluster/slurm.sbatch`` on a real Slurm (tests/slurm_cluster.py): the smoke
graph to its report on a directory root; on an S3 root (the loopback SeaweedFS), a job
``scancel``led while it trains, then submitted again, resuming from the store with the
same keys. After each job, nothing of its Ray is left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipeline.config import load_config
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.graph import plan
from tests.helpers import REPO, set_options, smoke_briefly
from tests.s3_server import free_port
from tests.slurm_cluster import SlurmCluster, available

pytestmark = pytest.mark.slow
SMOKE = REPO / "configs" / "smoke.yaml"
FAST = smoke_briefly(40)  # the job is about launching, not about training


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
    left = []
    for process in psutil.process_iter():
        try:
            if f"/tmp/ray-{job}/" in " ".join(process.cmdline()):
                left.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
        except psutil.Error:
            pass
    return left


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


def test_sbatch_runs_the_smoke_graph_to_its_report_and_leaves_no_ray_behind(slurm, multi30k, tmp_path):
    root = str(tmp_path / "artifacts")
    workdir = tmp_path / "job"
    job = submit(slurm, root, workdir, job_env(tmp_path, multi30k))
    wait_gone(slurm, job, workdir)
    log = job_log(workdir, job)
    assert "1 of 1 Ray nodes alive" in log, log[-4000:]
    states = graph_state(root, {})
    assert all(state == ArtifactState.CACHED for _, state in states.values()), (states, log[-4000:])
    assert "report" in states
    time.sleep(2)
    assert not ray_processes_of(job), ray_processes_of(job)


def test_a_job_cancelled_while_it_trains_resumes_from_the_s3_store_with_the_same_keys(slurm, s3, multi30k,
                                                                                       tmp_path):
    root = s3.uri("slurm/smoke")
    env = job_env(tmp_path, multi30k, s3.env())
    workdir = tmp_path / "job"
    first = submit(slurm, root, workdir, env)
    deadline = time.time() + 600
    while not re.search(r"train \w+_tiny", job_log(workdir, first)):  # a train stage's bar: it trains
        assert slurm.job_state(first), f"the job ended before training:\n{job_log(workdir, first)[-4000:]}"
        assert time.time() < deadline, job_log(workdir, first)[-4000:]
        time.sleep(1)
    slurm.run("scancel", first)
    wait_gone(slurm, first, workdir, timeout=120)
    time.sleep(2)
    assert not ray_processes_of(first), ray_processes_of(first)
    before = graph_state(root, s3.env())
    assert any(state != ArtifactState.CACHED for _, state in before.values())  # it was stopped short

    second = submit(slurm, root, workdir, env)
    wait_gone(slurm, second, workdir)
    after = graph_state(root, s3.env())
    assert all(state == ArtifactState.CACHED for _, state in after.values()), job_log(workdir, second)[-4000:]
    assert {name: key for name, (key, _) in after.items()} == {name: key for name, (key, _) in before.items()}
    log = job_log(workdir, second)
    assert "cache hit" in log  # what the first job committed was not computed again
    assert not ray_processes_of(second)
