"""The local Ray instance ``nmt run`` and ``nmt serve`` start (``connect_ray``): its own
processes reach its own State API, whatever other Ray instance is on the machine.

Ray Train's placement-group cleaner asks the State API once a second whether its
controller lives. Left to find a cluster itself, the State API client picked another
instance on the machine; where that one did not answer (a stopped or dying instance),
every train stage ended 12-15 s late while the cleaner's call timed out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow

ASK_FROM_A_TASK = """
import time, ray
from pipeline.runner import connect_ray

connect_ray(None)

@ray.remote
class Probe:
    def ping(self):
        return 1

@ray.remote
def ask(actor_id):
    from ray.util.state import get_actor
    started = time.monotonic()
    state = get_actor(actor_id, timeout=5)
    return (state.state if state else None), time.monotonic() - started

probe = Probe.remote()
ray.get(probe.ping.remote())
state, seconds = ray.get(ask.remote(probe._actor_id.hex()), timeout=120)
print("STATE", state, round(seconds, 2))
"""


@pytest.fixture
def unanswering_ray():
    """A ``ray start`` instance on this machine whose GCS is stopped (SIGSTOP): found by
    Ray's own lookups (the last cluster started, the GCS processes running), never answering."""
    from tests.ray_cluster import start_another_instance
    from tests.s3_server import kill_group

    process, port = start_another_instance()
    gcs = [p for p in psutil.process_iter(["cmdline"])
           if "gcs_server" in " ".join(p.info["cmdline"] or []) and f"={port}" in " ".join(p.info["cmdline"])]
    assert len(gcs) == 1, gcs
    gcs[0].send_signal(signal.SIGSTOP)
    yield
    gcs[0].send_signal(signal.SIGCONT)
    kill_group(process)


def test_tasks_of_the_local_instance_reach_its_own_state_api_beside_an_unanswering_one(unanswering_ray,
                                                                                      tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    result = subprocess.run([sys.executable, "-c", ASK_FROM_A_TASK], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    state, seconds = result.stdout.split("STATE ", 1)[1].split()
    assert state == "ALIVE" and float(seconds) < 5, result.stdout


START_AND_WAIT = """
import time, ray
from pipeline.runner import connect_ray

connect_ray(None)
ray.get(ray.remote(lambda: 1).remote())
print("READY", flush=True)
time.sleep(600)
"""


def session_processes(session: int) -> list[psutil.Process]:
    """The live (not zombie) processes of a session."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getsid(process.pid) == session and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):
            pass
    return found


def test_a_sigkilled_driver_leaves_no_process_of_its_instance():
    """Killed outright, a driver cannot stop its instance: Ray's dashboard and
    runtime-environment agents lived on about 60 s. The watcher it started kills them."""
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    driver = subprocess.Popen([sys.executable, "-c", START_AND_WAIT], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert driver.stdout.readline().strip() == "READY"
        names = " ".join(process.name() for process in session_processes(driver.pid))
        assert "raylet" in names and "ray::DashboardAgent" in names and "ray::RuntimeEnvAgent" in names, names
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 20
    while (left := session_processes(driver.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [process.name() for process in left]


def test_clusters_the_tests_start_name_their_own_state_api_not_the_local_instance_s(local_ray):
    """The local_ray fixture's instance names its State API in this process's
    environment. The clusters a later test starts from here inherit that environment:
    each must name its own State API (or none), or Ray Train's placement-group cleaner
    there asks this instance about its controller."""
    from pipeline.runner import API_SERVER_ENV
    from tests.ray_cluster import LocalRayCluster
    from tests.slurm_cluster import SlurmCluster

    assert os.environ.get(API_SERVER_ENV)  # what the fixture set, for this process's own State API calls
    node = LocalRayCluster(port=1234, dashboard_port=5678).node_environment(Path("/nowhere"))
    assert node[API_SERVER_ENV] == "http://127.0.0.1:5678" and node["RAY_ADDRESS"] == "127.0.0.1:1234"
    slurm = SlurmCluster()
    shutil.rmtree(slurm.dir)
    assert API_SERVER_ENV not in slurm.env


def test_the_suite_s_ray_instances_live_in_a_directory_of_its_own(local_ray):
    """RAY_TMPDIR (tests/conftest.py): this suite's session directories, its
    ``ray_current_cluster`` and its Slurm jobs' ``ray-<job id>`` are under a directory
    no other suite on the machine shares, not under /tmp/ray."""
    import ray

    own = os.environ["RAY_TMPDIR"]
    assert own != "/tmp" and os.path.isdir(own)
    session = ray._private.worker.global_worker.node.get_session_dir_path()
    assert session.startswith(f"{own}/ray/"), session
