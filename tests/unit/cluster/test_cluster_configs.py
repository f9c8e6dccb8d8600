"""The cluster launch files: the Ray autoscaler config, the KubeRay RayJob and the Slurm
script parse, start Ray with token authentication, keep stage work off the head where
they own it, install the same way, and take object store keys from the environment."""

from __future__ import annotations

import re
import subprocess

import yaml

from tests.helpers import REPO

CLUSTER = REPO / "cluster"


def test_the_autoscaler_config_installs_every_node_and_turns_token_auth_on():
    config = yaml.safe_load((CLUSTER / "aws-gpu.yaml").read_text())
    assert config["head_node_type"] in config["available_node_types"]
    assert any("cluster/install.sh" in command for command in config["setup_commands"])
    for command in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        if command.startswith("ray start") or " ray start" in command:
            assert command.startswith("RAY_AUTH_MODE=token ")
    assert "~/.ray/auth_token" in config["file_mounts"]
    for node_type in config["available_node_types"].values():
        # S3 access from the instance role, never keys in the config.
        assert "IamInstanceProfile" in node_type["node_config"]
    assert not re.search(r"AWS_SECRET_ACCESS_KEY|aws_secret", (CLUSTER / "aws-gpu.yaml").read_text())


def test_the_kuberay_job_runs_nmt_on_a_token_authenticated_cluster():
    job = yaml.safe_load((CLUSTER / "kuberay.yaml").read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["entrypoint"].startswith("nmt run ") and "--artifact-root s3://" in spec["entrypoint"]
    cluster = spec["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    containers = [cluster["headGroupSpec"]["template"]["spec"]["containers"][0]]
    containers += [group["template"]["spec"]["containers"][0] for group in cluster["workerGroupSpecs"]]
    for container in containers:
        env = {item["name"]: item for item in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        for secret in ("RAY_AUTH_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert "secretKeyRef" in env[secret]["valueFrom"] and "value" not in env[secret]
    assert any("nvidia.com/gpu" in group["template"]["spec"]["containers"][0]["resources"]["limits"]
               for group in cluster["workerGroupSpecs"])


def test_the_slurm_script_is_valid_bash_and_starts_an_authenticated_cluster_without_fixed_sleeps():
    """What a reader of cluster/slurm.sbatch relies on; the script runs under a real
    Slurm in tests/e2e/test_slurm.py."""
    script = (CLUSTER / "slurm.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(CLUSTER / "slurm.sbatch")], capture_output=True).returncode == 0
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", script, flags=re.M))
    assert int(directives["nodes"]) >= 2 and "time" in directives
    assert re.fullmatch(r"B:USR1@\d+", directives["signal"])  # an early signal, to the script
    assert "export RAY_AUTH_MODE=token" in script and "export RAY_AUTH_TOKEN" in script
    head = script[script.index("ray start --head"):].split("&\n", 1)[0]  # the command, continuation lines too
    assert "--block" in head and '--temp-dir="${ray_tmp}"' in head
    assert not re.search(r"^\s*sleep ", script, flags=re.M)  # readiness is waited for, not slept on
    assert script.count("nmt cluster-wait") == 2
    run = next(line for line in script.splitlines() if line.lstrip().startswith("nmt run"))
    assert "--address" in run and "--artifact-root" in run
    assert "trap stop_ray EXIT" in script and "ray stop" in script  # Ray stopped on every node, failed or not
