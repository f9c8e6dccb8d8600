"""``ray up`` over SSH with cluster/onprem.yaml, then ``ray job submit`` of the smoke
graph on the token-authenticated cluster, then ``ray down``: as a user launches on
machines they already have. The machines are OpenSSH servers on 127.0.0.2 (head) and
127.0.0.3 (worker), each in its own PID namespace (tests/ssh_nodes.py)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, processes_naming, set_options, smoke_briefly
from tests.s3_server import free_port
from tests.ssh_nodes import SshNodes, available

pytestmark = pytest.mark.slow
HEAD, WORKER = "127.0.0.2", "127.0.0.3"
FAST = smoke_briefly(20, one_model=True)  # the job is about launching, not about training


@pytest.fixture(scope="module")
def machines():
    reason = available([HEAD, WORKER])
    if reason:
        pytest.skip(reason)
    nodes = SshNodes([HEAD, WORKER]).start()
    yield nodes
    left = nodes.stop()
    assert not left, f"SSH servers outlived their nodes: {left}"


def node_flags(address: str, temp_dir: Path) -> str:
    """Ports and directories of a node of its own: this machine may run other Ray instances."""
    ports = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "runtime-env-agent-port", "metrics-export-port")
    return " ".join([f"--node-ip-address={address}", f"--temp-dir={temp_dir}", "--object-store-memory=100000000",
                     *(f"--{port}={free_port()}" for port in ports)])


VENV = "~/nmt-pipeline/.venv"  # where cluster/onprem.yaml's nodes have nmt-pipeline installed
ACTIVATION = f". {VENV}/bin/activate"  # how its commands begin; its setup adds it to ~/.bashrc


def environment(work: Path) -> Path:
    """What the nodes' ~/nmt-pipeline/.venv is: this test's virtualenv (the README's,
    under .ci/run), or, run from a Python that is not one, a directory whose
    bin/activate puts that Python's bin/ first on PATH."""
    if (Path(sys.prefix) / "bin" / "activate").is_file():
        return Path(sys.prefix)
    (work / "env" / "bin").mkdir(parents=True)
    (work / "env" / "bin" / "activate").write_text(f'export PATH="{Path(sys.prefix) / "bin"}:$PATH"\n')
    return work / "env"


def cluster_config(machines: SshNodes, work: Path, nodes: Path, port: int, dashboard: int) -> Path:
    """cluster/onprem.yaml for these machines: their addresses, key and free ports, their
    Ray directories under ``nodes``, the token a file of the test's own. Its commands
    run as written: each node's home (tests/ssh_nodes.py) has nmt-pipeline at
    ~/nmt-pipeline/.venv (this test's environment) and nothing else, so `ray stop` in a
    node's login shell finds Ray only if the config's setup command did its work."""
    raw = yaml.safe_load((REPO / "cluster" / "onprem.yaml").read_text())
    for address in (HEAD, WORKER):
        (machines.home(address) / "nmt-pipeline").mkdir()
        (machines.home(address) / "nmt-pipeline" / ".venv").symlink_to(environment(work))
    (work / "token").write_text(secrets.token_hex(32))
    raw["provider"].update(head_ip=HEAD, worker_ips=[WORKER])
    raw["auth"] = {"ssh_user": "root", "ssh_private_key": str(machines.key)}
    raw["max_workers"] = 1
    assert list(raw["file_mounts"]) == ["~/.ray/auth_token"], raw["file_mounts"]
    raw["file_mounts"] = {"~/.ray/auth_token": str(work / "token")}  # to each node's ~, as the config says
    assert all(ACTIVATION in command and "~/.bashrc" in command for command in raw["setup_commands"]), raw
    for commands in (raw["head_start_ray_commands"], raw["worker_start_ray_commands"]):
        assert all(command.startswith(ACTIVATION + " && ") for command in commands), commands
    head = raw["head_start_ray_commands"][-1]
    assert "--port=6379" in head and "--dashboard-port=8265" in head and "--dashboard-host=0.0.0.0" in head
    raw["head_start_ray_commands"][-1] = (
        head.replace("--port=6379", f"--port={port}").replace("--dashboard-port=8265", f"--dashboard-port={dashboard}")
        .replace("--dashboard-host=0.0.0.0", f"--dashboard-host={HEAD}")
        + f" --ray-client-server-port={free_port()} " + node_flags(HEAD, nodes / "head"))
    worker = raw["worker_start_ray_commands"][-1]
    assert "$RAY_HEAD_IP:6379" in worker
    raw["worker_start_ray_commands"][-1] = (worker.replace("6379", str(port))
                                            + " --num-cpus=2 " + node_flags(WORKER, nodes / "worker"))
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell would have it: without the Ray
    settings an earlier test in this process left (RAY_API_SERVER_ADDRESS and RAY_ADDRESS
    override `ray job submit --address`; a test's local instance sets the first) and
    without a token, plus ``extra``."""
    return {**{key: value for key, value in os.environ.items()
               if key not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS") and not key.startswith("RAY_AUTH")}, **extra}


def ray(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    binary = str(Path(sys.executable).parent / "ray")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout, env=env or user_env())


def cluster_processes(nodes: Path) -> list[str]:
    return processes_naming(f"{nodes}/")


def test_the_launch_test_skips_naming_the_address_whose_ssh_port_is_taken():
    """Where something holds port 22 on a node's address (another suite's SSH node, a
    server of this machine), the test above skips with that reason instead of erroring."""
    import socket

    from tests.ssh_nodes import port_taken

    if os.geteuid() != 0:
        pytest.skip("binding port 22 needs root")
    if port_taken(WORKER, 22):
        pytest.skip(f"port 22 on {WORKER} is taken already")
    with socket.socket() as holder:
        holder.bind((WORKER, 22))
        holder.listen()
        reason = available([HEAD, WORKER]) or ""
    assert f"port 22 on {WORKER} is taken" in reason or "not installed" in reason, reason


def test_ray_up_runs_the_smoke_graph_through_the_jobs_api_and_ray_down_stops_it(machines, multi30k, tmp_path):
    port, dashboard = free_port(), free_port()
    # Short: a Ray node's socket paths, under its temp dir, must fit in 107 bytes.
    nodes = Path(tempfile.mkdtemp(prefix="rayup-", dir="/tmp"))
    config = cluster_config(machines, tmp_path, nodes, port, dashboard)
    up = ray("up", str(config), "--yes", "--no-config-cache")
    (tmp_path / "ray_up.log").write_text(up.stdout + up.stderr)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    # The setup command made the head's login shell activate the environment, once.
    assert (machines.home(HEAD) / ".bashrc").read_text().splitlines().count(ACTIVATION) == 1
    # The head's Ray runs from the environment its commands activated.
    assert any(f"{sys.prefix}/" in process for process in cluster_processes(nodes)), cluster_processes(nodes)
    auth = user_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=(tmp_path / "token").read_text())
    try:
        wait = subprocess.run([sys.executable, "-m", "pipeline", "cluster-wait", "--address", f"{HEAD}:{port}",
                               "--nodes", "2", "--timeout", "300"], env=auth, capture_output=True, text=True)
        assert wait.returncode == 0, wait.stderr
        # and the worker's, which the head's autoscaler set up
        assert (machines.home(WORKER) / ".bashrc").read_text().splitlines().count(ACTIVATION) == 1

        jobs = f"http://{HEAD}:{dashboard}"
        # No token in the environment (~/.ray/auth_token, if this machine has one, is not the cluster's)
        refused = ray("job", "submit", "--address", jobs, "--", "true", env=user_env(), timeout=60)
        assert refused.returncode != 0 and "token" in (refused.stdout + refused.stderr).lower()

        # As docs/clusters.md shows: the artifact root and the MLflow URI as nmt run's own options.
        command = ["nmt", "run", str(REPO / "configs" / "smoke.yaml"), "--artifact-root", str(tmp_path / "artifacts"),
                   "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                   *set_options(FAST)]
        # PYTHONPATH: the job runs this checkout's code, whichever one pip installed.
        runtime_env = json.dumps({"env_vars": {"NMT_MIRROR": str(multi30k), "PYTHONPATH": str(REPO)}})
        started = time.time()
        for attempt in range(30):  # the head's job agent registers a few seconds after the node
            job = ray("job", "submit", "--address", jobs, "--runtime-env-json", runtime_env, "--", *command,
                      env=auth, timeout=1200)
            if "No available agent" not in job.stdout + job.stderr:
                break
            time.sleep(2)
        (tmp_path / "job.log").write_text(job.stdout + job.stderr)
        assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-2000:]
        assert "succeeded" in job.stdout and "report" in job.stdout  # its logs: the stages, the report
        # and their progress, from the worker node: training's with its rate, decoding's
        # to its end (the briefly trained model's 100 sentences decode in under a second,
        # before a rate is shown)
        assert re.search(r"ip=127\.0\.0\.3\).*train transformer_tiny .*update/s", job.stdout), job.stdout[-4000:]
        assert re.search(r"evaluate \w+ \[1-100\]: 100/100 sent \(100%\)", job.stdout), job.stdout[-4000:]
        assert time.time() - started < 1200

        failing = ray("job", "submit", "--address", jobs, "--", "nmt", "run", str(tmp_path / "missing.yaml"),
                      env=auth, timeout=300)
        assert failing.returncode != 0  # the job's exit status is the pipeline's
    finally:
        down = ray("down", str(config), "--yes")
        # ray down stops the head's Ray, not the workers': as docs/clusters.md says to
        machines.ssh(WORKER, f"{VENV}/bin/ray stop", check=False)
    assert down.returncode == 0, down.stderr[-2000:]
    deadline = time.time() + 60
    while cluster_processes(nodes) and time.time() < deadline:
        time.sleep(1)
    assert not cluster_processes(nodes), cluster_processes(nodes)
    shutil.rmtree(nodes, ignore_errors=True)
