"""Two ``nmt run``s of one config against one artifact root at the same time, each with
its own Ray instance, cache and MLflow store (two users sharing a store): on a local
root and on an S3 server. The second starts while the first trains, and reaches a key
the first holds: the first's training worker is stopped (SIGSTOP) until the second
says it waits for that key, so the order does not depend on which run is faster. Both
finish with the same keys, every stage is computed by exactly one of them (the other
waits on its lease and takes the artifact as a cache hit), every manifest verifies,
and nothing half-written or held is left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.fs as pafs
import pytest

from pipeline.config import load_config
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.driver_sigterm import TRAIN_WORKER, training_workers_below
from pipeline.graph import plan
from tests.helpers import REPO

CONFIG = str(REPO / "configs" / "smoke.yaml")
UNTIL = "train/rnn_tiny"
# A short training, without BLEU curves: the first run's worker is held while the second
# reaches its key, so no length of training is needed to make that happen.
SETTINGS = ["train.max_steps=20", "train.warmup_steps=10", "train.valid_every=10", "train.checkpoint_every=10",
            "train.valid_bleu_every=null"]
RUN = ["run", CONFIG, "--until", UNTIL, *[arg for setting in SETTINGS for arg in ("--set", setting)]]
pytestmark = pytest.mark.slow


def start_run(workdir: Path, multi30k: Path, root: str, extra_env: dict) -> tuple[subprocess.Popen, Path]:
    """``nmt run`` in ``workdir``, what it prints going to ``workdir/run.log``."""
    workdir.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # socket paths must stay short
    env = {**{key: value for key, value in os.environ.items() if not key.startswith("AWS_")}, **extra_env,
           "NMT_MIRROR": str(multi30k), "NMT_CACHE_DIR": str(workdir / "cache"), "RAY_TMPDIR": str(ray_tmp),
           "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}", "COLUMNS": "250"}
    with (workdir / "run.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "pipeline", *RUN, "--artifact-root", root], cwd=workdir,
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
    return process, ray_tmp


def printed(workdir: Path) -> str:
    return (workdir / "run.log").read_text(errors="replace")


def wait_until(condition, process: subprocess.Popen, workdir: Path, what: str, timeout: float = 300):
    deadline = time.time() + timeout
    while not (found := condition()):
        assert process.poll() is None, f"the run ended before {what}:\n{printed(workdir)[-3000:]}"
        assert time.time() < deadline, f"no {what} in {timeout:.0f} s:\n{printed(workdir)[-3000:]}"
        time.sleep(0.05)
    return found


def ray_train_workers_below(pid: int) -> list:
    workers = []
    for process in training_workers_below(pid):
        try:
            if TRAIN_WORKER in " ".join(process.cmdline()):
                workers.append(process)
        except psutil.Error:  # ended while looked at
            pass
    return workers


@pytest.fixture(params=["local", "s3"])
def shared_root(request, tmp_path):
    """(root URI, environment, filesystem and path to list it) for each kind of root."""
    if request.param == "local":
        yield str(tmp_path / "shared"), {}, pafs.LocalFileSystem(), str(tmp_path / "shared")
    else:
        s3 = request.getfixturevalue("s3")
        with pytest.MonkeyPatch.context() as patch:
            for name, value in s3.env().items():
                patch.setenv(name, value)
            yield s3.uri("nmt-artifacts/shared"), s3.env(), s3.filesystem(), "nmt-artifacts/shared"


def test_two_runs_at_once_compute_each_stage_once_and_agree(shared_root, tmp_path, multi30k):
    root, env, fs, listed = shared_root
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    runs = [start_run(alice, multi30k, root, env)]
    wait_until(lambda: [info for info in fs.get_file_info(pafs.FileSelector(listed, recursive=True,
                                                                             allow_not_found=True))
                        if "/train/" in info.path and info.path.endswith(".lease")],
               runs[0][0], alice, "a held train key")
    # Its Ray Train worker, not the stage task, which keeps renewing the lease meanwhile.
    held = wait_until(lambda: ray_train_workers_below(runs[0][0].pid), runs[0][0], alice, "a Ray Train worker")
    for worker in held:
        worker.send_signal(signal.SIGSTOP)
    try:
        runs.append(start_run(bob, multi30k, root, env))
        wait_until(lambda: f"{UNTIL}: waiting for" in printed(bob), runs[1][0], bob, "the second run waiting")
    finally:
        for worker in held:
            worker.send_signal(signal.SIGCONT)
    outputs = []
    for (process, ray_tmp), workdir in zip(runs, (alice, bob)):
        process.wait(timeout=900)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert process.returncode == 0, printed(workdir)[-3000:]
        outputs.append(printed(workdir))

    # The second run reached a key the first held, and waited for it.
    assert "waiting for" in outputs[1], outputs[1][-3000:]
    # Each stage (four data stages, one training) ran in one run and was a cache hit in the other.
    assert sum(output.count("│ ran ") for output in outputs) == 5, outputs
    assert sum(output.count("│ cached ") for output in outputs) == 5, outputs
    store = ArtifactStore(root, local_cache=tmp_path / "check-cache")
    planned = plan(load_config(CONFIG, SETTINGS), store, until=UNTIL)
    for item in planned:
        assert item.key in outputs[0] and item.key in outputs[1]
        assert store.status(item.stage.name, item.key, verify=True).state == ArtifactState.CACHED
    left = [info.path for info in fs.get_file_info(pafs.FileSelector(listed, recursive=True))
            if ".partial" in info.path or ".lease" in info.path]
    assert left == []
