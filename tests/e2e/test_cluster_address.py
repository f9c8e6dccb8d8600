"""Joining a cluster that is not what the command expects fails within seconds, naming
what failed and what to do: a token-authenticated head (tests/ray_cluster.py) asked
without its token or with another, a head that is not there, a cluster still missing
nodes. Through the commands users run: ``nmt cluster-wait`` and ``nmt run --address``."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO
from tests.ray_cluster import LocalRayCluster
from tests.s3_server import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def head():
    cluster = LocalRayCluster().start(worker_cpus=[])
    yield cluster
    cluster.stop()


def nmt(*args: str, token: str | None, tmp_path) -> tuple[subprocess.CompletedProcess, float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    return done, time.monotonic() - started


def test_cluster_wait_answers_with_the_token_and_names_the_token_without_it(head, tmp_path):
    done, _ = nmt("cluster-wait", "--address", head.address, "--nodes", "1", token=head.token, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"1 of 1 Ray nodes alive at {head.address}" in done.stdout

    done, seconds = nmt("cluster-wait", "--address", head.address, "--nodes", "1", token=None, tmp_path=tmp_path)
    assert done.returncode == 1 and seconds < 15
    assert "asks for a token: export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in done.stderr

    done, seconds = nmt("cluster-wait", "--address", head.address, "--nodes", "1", token="0" * 32, tmp_path=tmp_path)
    assert done.returncode == 1 and seconds < 15
    assert "refused the token in RAY_AUTH_TOKEN" in done.stderr


def test_cluster_wait_names_the_nodes_missing_after_its_timeout(head, tmp_path):
    done, seconds = nmt("cluster-wait", "--address", head.address, "--nodes", "2", "--timeout", "3",
                        token=head.token, tmp_path=tmp_path)
    assert done.returncode == 1 and seconds < 20
    assert f"only 1 of 2 Ray nodes joined the cluster at {head.address} within 3 s" in done.stderr


def test_nmt_run_without_the_token_or_at_a_dead_head_fails_at_once_and_opens_no_mlflow_run(head, tmp_path):
    config = str(REPO / "configs" / "smoke.yaml")
    common = ("--artifact-root", str(tmp_path / "artifacts"), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db")
    done, seconds = nmt("run", config, "--address", head.address, *common, token=None, tmp_path=tmp_path)
    assert done.returncode == 2 and seconds < 30, done.stderr[-2000:]
    assert f"the Ray cluster at {head.address} asks for a token" in done.stderr

    dead = f"127.0.0.1:{free_port()}"
    done, seconds = nmt("run", config, "--address", dead, *common, token=head.token, tmp_path=tmp_path)
    assert done.returncode == 2 and seconds < 30
    assert f"no Ray head answers at {dead}" in done.stderr and "ray start --head" in done.stderr
    if (tmp_path / "mlflow.db").exists():  # no parent run was opened and left RUNNING
        with sqlite3.connect(tmp_path / "mlflow.db") as db:
            assert db.execute("select count(*) from runs").fetchone()[0] == 0
