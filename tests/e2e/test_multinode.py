"""The pipeline on a real multi-node Ray cluster, all on this machine.

The cluster (``tests/ray_cluster.py``): a head that offers no CPUs for work and three
worker nodes with one CPU each, started as separate processes with their own cache
and temp directories and Ray's token authentication on. Artifacts live on an S3
server (SeaweedFS); MLflow is an ``mlflow server`` with a SQLite store and its
artifacts on the same S3 server. A one-model smoke graph runs end to end: clean's and
tokenize's tasks spread over the worker nodes, and the model is trained by two Ray
Train workers on two different nodes (STRICT_SPREAD), while
  1. a worker node is killed (SIGKILL to all its processes) during training: Ray
     Train restarts the worker group on the spare node from the checkpoint in the
     store, and the run finishes;
  2. the driver is killed during training (another seed's model, on the same store),
     and ``nmt run`` started again from another working directory resumes from the
     stored checkpoint, reuses every finished stage, and ends with every stage at the
     key its config gives it, as an uninterrupted run does.

Run it alone with ``pytest -m multinode``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.fs as pafs
import pytest
import requests
import yaml

from pipeline.core.artifacts import ArtifactStore
from pipeline.config import load_config
from pipeline.graph import plan
from stages.train.checkpointer import complete_checkpoints
from tests.helpers import shipped_config
from tests.mlflow_server import MlflowServer
from tests.ray_cluster import LocalRayCluster

pytestmark = [pytest.mark.slow, pytest.mark.multinode]
BUCKET = "nmt-multinode"


@pytest.fixture(scope="module")
def cluster(s3):
    # Node deaths are noticed within seconds rather than the default half minute.
    fast_failure = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                    "RAY_health_check_failure_threshold": "3"}
    ray_cluster = LocalRayCluster(env={**s3.env(), **fast_failure}).start([1, 1, 1])
    yield ray_cluster
    ray_cluster.stop()


@pytest.fixture(scope="module")
def mlflow_server(s3, tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), s3).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    """The smoke graph with one model, trained by two workers on two nodes; clean's
    3,000 training pairs in six tasks."""
    data = shipped_config("smoke.yaml")
    data["name"] = "multinode"
    data["clean"]["rows_per_task"] = 500
    data["train"].update(workers=2, cpus_per_worker=1, placement_strategy="STRICT_SPREAD", max_steps=40,
                         warmup_steps=20, valid_every=20, checkpoint_every=10, keep_checkpoints=2, average_last=2,
                         max_failures=3)
    data["evaluate"] = {"shards": 2, "beam_size": 2, "greedy": False}
    data["models"] = [{"name": "transformer_tiny", "family": "transformer", "preset": "tiny"}]
    path = tmp_path_factory.mktemp("config") / "multinode.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_nmt(workdir: Path, root: str, config: Path, cluster, s3, mlflow_server, multi30k,
              settings: tuple[str, ...] = ()) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **s3.env(), **cluster.auth_env(), "NMT_MIRROR": str(multi30k),
           "NMT_CACHE_DIR": str(workdir / "cache"), "MLFLOW_TRACKING_URI": mlflow_server.uri, "COLUMNS": "250"}
    return subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(config), "--address", cluster.address,
                             "--artifact-root", root, *[arg for item in settings for arg in ("--set", item)]],
                            cwd=workdir, env=env, start_new_session=True,
                            stdout=open(workdir / "stdout.txt", "w"), stderr=open(workdir / "stderr.txt", "w"))


def wait_for_checkpoint(fs: pafs.FileSystem, prefix: str, process: subprocess.Popen, workdir: Path,
                        config: Path, timeout: float = 300) -> None:
    """Until a train stage has persisted a complete checkpoint under ``prefix`` in the
    store: every worker's DeepSpeed files and rank 0's progress, as a resuming run
    requires (``checkpointer.complete_checkpoints``). Rank 0's ``progress.json`` alone can
    land before the other rank's shard, and a run killed then must start over."""
    training = load_config(config).train
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, f"nmt run ended early: {(workdir / 'stderr.txt').read_text()[-3000:]}"
        listing = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        partial = {match.group(1) for info in listing
                   if (match := re.search(r"^(.*/train/[^/]+/[^/]+\.partial)/.*/checkpoint_[^/]*/progress\.json$",
                                          info.path))}
        if any(complete_checkpoints(run, training.workers, training.zero_stage, fs) for run in partial):
            return
        time.sleep(1)
    raise AssertionError("no complete checkpoint reached the store in time")


def train_worker_nodes(cluster: LocalRayCluster) -> set[str]:
    """The nodes running a Ray Train worker now, told apart by the cache directory each
    node's processes inherit."""
    caches = {str(node.cache_dir): name for name, node in cluster.nodes.items() if node.process.poll() is None}
    nodes = set()
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            title = " ".join(process.info["cmdline"] or [process.info["name"]])
            if "ray::RayTrainWorker" in title:
                node = caches.get(process.environ().get("NMT_CACHE_DIR", ""))
                if node:
                    nodes.add(node)
        except psutil.Error:
            continue
    return nodes


def finish(process: subprocess.Popen, workdir: Path, timeout: float = 420) -> str:
    process.wait(timeout=timeout)
    stdout, stderr = (workdir / "stdout.txt").read_text(), (workdir / "stderr.txt").read_text()
    assert process.returncode == 0, stderr[-4000:]
    return stdout


def committed(fs: pafs.FileSystem, prefix: str) -> dict[str, dict]:
    """stage/key -> manifest, for every committed artifact under ``prefix``."""
    manifests = {}
    for info in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)):
        if info.base_name == "MANIFEST.json":
            with fs.open_input_stream(info.path) as stream:
                manifests[info.path[len(prefix) + 1:-len("/MANIFEST.json")]] = json.loads(stream.read())
    return manifests


def test_the_dashboards_job_api_refuses_requests_without_the_token(cluster):
    url = f"http://127.0.0.1:{cluster.dashboard_port}/api/jobs/"
    assert requests.get(url, timeout=30).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer wrong-token"}, timeout=30).status_code in (401, 403)
    assert requests.get(url, headers={"Authorization": f"Bearer {cluster.token}"}, timeout=30).status_code == 200


def test_a_worker_node_killed_during_training_is_survived(cluster, s3, mlflow_server, config_file, multi30k,
                                                          tmp_path):
    fs = s3.filesystem()
    started = time.time()
    run = start_nmt(tmp_path / "run", s3.uri(f"{BUCKET}/uninterrupted"), config_file, cluster, s3, mlflow_server,
                    multi30k)
    wait_for_checkpoint(fs, f"{BUCKET}/uninterrupted", run, tmp_path / "run", config_file)
    nodes = train_worker_nodes(cluster)
    assert len(nodes) == 2, f"the two train workers should run on two nodes, found {nodes}"
    cluster.kill_node(sorted(nodes)[0])
    stdout = finish(run, tmp_path / "run")
    print(f"multi-node smoke graph with a killed node: {time.time() - started:.0f} s")

    artifacts = committed(fs, f"{BUCKET}/uninterrupted")
    train = next(manifest for name, manifest in artifacts.items() if name.startswith("train/"))
    assert train["metrics"]["restarts"] >= 1  # resumed from a stored checkpoint
    assert "report/" in " ".join(artifacts) and len(artifacts) == 7
    # The data stages fanned out: clean's six tasks ran on more than one node, each
    # reading its input from the store on its own node. Tokenize's few tasks go to the
    # nodes Ray reports free when they are dealt, which may be one node (a stale view
    # after clean); the dealing itself is specified in tests/unit/pipeline/test_context_tasks.py.
    stage_metrics = {name.split("/")[0]: manifest["metrics"] for name, manifest in artifacts.items()}
    assert stage_metrics["clean"]["train_tasks"] == 6 and stage_metrics["clean"]["train_nodes"] >= 2
    assert stage_metrics["tokenize"]["nodes"] >= 1
    # The checkpoints' staging prefix is gone once the artifact is committed.
    listing = fs.get_file_info(pafs.FileSelector(BUCKET, recursive=True))
    assert not [info.path for info in listing if ".partial/" in info.path and "/uninterrupted/" in info.path]
    # Decoding fetched only what translating reads from the train artifact, never its checkpoints.
    for node in cluster.nodes.values():
        fetched = [path for path in (node.cache_dir / "artifacts" / "train").rglob("*") if path.is_file()]
        assert not [path for path in fetched if "train_run" in path.parts]
    # MLflow's run artifacts went to the S3 bucket through the server.
    assert fs.get_file_info(pafs.FileSelector("mlflow-artifacts", recursive=True))
    assert "report" in stdout


def test_a_killed_driver_resumes_from_the_stored_checkpoint_in_a_new_run(cluster, s3, mlflow_server, config_file,
                                                                          multi30k, tmp_path):
    """On the store of the test above, another seed: the data stages are its artifacts
    (computed here if that test did not run), the model is a new one."""
    fs, root = s3.filesystem(), s3.uri(f"{BUCKET}/uninterrupted")
    another_seed = ("train.seed=7",)
    first = start_nmt(tmp_path / "first", root, config_file, cluster, s3, mlflow_server, multi30k, another_seed)
    wait_for_checkpoint(fs, f"{BUCKET}/uninterrupted", first, tmp_path / "first", config_file)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    store = ArtifactStore(f"{BUCKET}/uninterrupted", local_cache=tmp_path / "cache", filesystem=fs)
    planned = {item.stage.name: item.key for item in plan(load_config(config_file, list(another_seed)), store)}
    trained = next(f"{stage}/{key}" for stage, key in planned.items() if stage.startswith("train/"))
    done_before = set(committed(fs, f"{BUCKET}/uninterrupted"))
    assert {f"{stage}/{planned[stage]}" for stage in ("download", "clean", "bpe", "tokenize")} <= done_before
    assert trained not in done_before  # killed while it trained

    second = start_nmt(tmp_path / "elsewhere", root, config_file, cluster, s3, mlflow_server, multi30k, another_seed)
    stdout = finish(second, tmp_path / "elsewhere")
    artifacts = committed(fs, f"{BUCKET}/uninterrupted")
    # Every stage of the graph, at the key the config gives it: what an uninterrupted run ends with.
    assert {f"{stage}/{key}" for stage, key in planned.items()} <= set(artifacts)
    assert artifacts[trained]["metrics"]["restarts"] >= 1
    assert stdout.count("cached") >= 4  # the data stages finished before the kill were reused
