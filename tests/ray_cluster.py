"""A multi-node Ray cluster on one machine, for tests: a head and worker nodes started
as separate ``ray start --block`` processes, each in its own process group with its
own environment (cache directory, temp directory), so a test can kill a whole node
with one SIGKILL, as a machine that dies would.

Token authentication is on (``RAY_AUTH_MODE=token``): every node, and every driver
that joins, needs the cluster's token in ``RAY_AUTH_TOKEN``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.runner import API_SERVER_ENV
from tests.s3_server import free_port, kill_group


# On 2 busy cores (the whole suite under -n 2), a raylet took over 30 s to register with
# its head, Ray's default wait, and the node exited ("The node registration may not be
# complete yet before the timeout"): every node the tests start waits longer.
SLOW_MACHINE = {"RAY_raylet_start_wait_time_s": "300"}


def ray_binary() -> str:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.is_file() else "ray"


def start_another_instance() -> tuple[subprocess.Popen, int]:
    """Another Ray instance on this machine, started by ``ray start`` as a user's own
    would be (no CPUs, no dashboard), once it is the last cluster started: the one a bare
    ``ray.init()`` joins. Returns its ``ray start`` process (stop it with ``kill_group``)
    and its GCS port. A start that stalls (once in CI, under -n 2, after "Local node IP"
    and nothing more for 240 s) is tried again on new ports: the tests need the instance,
    not that one start."""
    try:
        return _start_another_instance()
    except RuntimeError:
        return _start_another_instance()


def _start_another_instance() -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", **SLOW_MACHINE}
    for setting in ("RAY_ADDRESS", API_SERVER_ENV):  # a user's instance knows nothing of this process's
        env.pop(setting, None)
    log = tempfile.TemporaryFile()
    process = subprocess.Popen([ray_binary(), "start", "--head", "--block", f"--port={port}", "--num-cpus=0",
                                "--include-dashboard=false", f"--ray-client-server-port={free_port()}"],
                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # Where Ray keeps it: under RAY_TMPDIR, which each test suite has of its own (conftest.py).
    latest = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    deadline = time.time() + 240
    while not (latest.is_file() and latest.read_text().strip().endswith(f":{port}")):
        if process.poll() is not None or time.time() > deadline:
            kill_group(process)
            log.seek(0)
            raise RuntimeError(f"the other Ray instance did not start: {log.read().decode(errors='replace')[-2000:]}")
        time.sleep(0.2)
    return process, port


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen
    temp_dir: Path
    cache_dir: Path


@dataclass
class LocalRayCluster:
    env: dict[str, str] = field(default_factory=dict)  # given to every node (e.g. object store keys)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    nodes: dict[str, RayNode] = field(default_factory=dict)
    port: int = 0
    dashboard_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def auth_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def start(self, worker_cpus: list[int]) -> LocalRayCluster:
        """A head offering no CPUs for work, and one worker node per entry of ``worker_cpus``."""
        self.port, self.dashboard_port = free_port(), free_port()
        self._start_node("head", ["--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=true",
                                  "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
                                  f"--ray-client-server-port={free_port()}"])
        # One node at a time, each once the one before has registered, as `ray start`
        # is meant to be run: started all at once on 2 busy cores, a worker's first
        # request to a head still starting timed out ("Failed to get node info: RPC
        # error: Deadline Exceeded") and the node exited.
        try:
            self._wait_for_nodes(1)
            for index, cpus in enumerate(worker_cpus, start=1):
                self._start_node(f"worker{index}", [f"--address={self.address}", f"--num-cpus={cpus}"])
                self._wait_for_nodes(1 + index)
        except BaseException:
            self.stop()  # the nodes already up would outlive the failed fixture
            raise
        return self

    def _start_node(self, name: str, args: list[str]) -> None:
        # Short paths: Ray's socket paths under the temp dir must fit in 107 bytes.
        temp_dir = Path(tempfile.mkdtemp(prefix=f"r{name[0]}{name[-1]}", dir="/tmp"))
        cache_dir = temp_dir / "nmt-cache"
        ports = [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
                 f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
                 f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}"]
        env = self.node_environment(cache_dir)
        command = [ray_binary(), "start", "--block", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
                   "--object-store-memory=100000000", "--disable-usage-stats", *ports, *args]
        log = open(temp_dir / "ray-start.log", "wb")
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.nodes[name] = RayNode(name, process, temp_dir, cache_dir)

    def node_environment(self, cache_dir: Path) -> dict[str, str]:
        """A node's environment. RAY_ADDRESS: Ray's own actors that connect back (Ray
        Train's placement group cleaner) must find this cluster, not another Ray instance
        on the machine. Its State API is its own head's dashboard, not that of an instance
        this process started before (the local_ray fixture names its own in this
        environment): the cleaner asks it whether this cluster's controller lives."""
        return {**os.environ, **SLOW_MACHINE, **self.env, **self.auth_env(), "NMT_CACHE_DIR": str(cache_dir),
                "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": self.address,
                API_SERVER_ENV: f"http://127.0.0.1:{self.dashboard_port}"}

    def _wait_for_nodes(self, count: int, timeout: float = 300) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for node in self.nodes.values():
                if node.process.poll() is not None:
                    raise RuntimeError(f"ray node {node.name} exited: "
                                       f"{(node.temp_dir / 'ray-start.log').read_text()[-3000:]}")
            result = subprocess.run([ray_binary(), "status", f"--address={self.address}"], capture_output=True,
                                    text=True, env={**os.environ, **self.auth_env()}, timeout=60)
            if result.returncode == 0 and result.stdout.count(" node_") >= count:
                return
            time.sleep(2)
        raise RuntimeError(f"{count} Ray nodes did not come up in {timeout:.0f} s")

    def kill_node(self, name: str) -> None:
        """SIGKILL every process of a node: its raylet, object store and workers."""
        kill_group(self.nodes[name].process)

    def stop(self) -> None:
        for name in reversed(list(self.nodes)):
            self.kill_node(name)
        for node in self.nodes.values():
            shutil.rmtree(node.temp_dir, ignore_errors=True)
