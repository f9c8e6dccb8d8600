"""A real one-node Slurm cluster on this machine, for tests: MUNGE and Slurm's own
daemons (``munged``, ``slurmctld``, ``slurmd``, Debian's packages) started with a
configuration, key and state of their own under one directory, on ports of their own,
so that ``sbatch``, ``squeue`` and ``scancel`` work as on a user's cluster. Every
command a test runs gets ``SLURM_CONF`` from ``env``. ``stop`` ends the jobs and every
daemon, and says which processes outlived it.

Debian's Slurm runs one ``slurmd`` per machine (several need a build with
``--enable-multiple-slurmd``), so the cluster has one node. The daemons run as root
(they switch to the job's user only when it is not root); ``available`` says why a
machine cannot run them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from pipeline.runner import API_SERVER_ENV
from tests.s3_server import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")


def available() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "the Slurm daemons need root (run the tests as root, or skip the Slurm tests)"
    missing = [name for name in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed: run tests/install_system_packages.sh"
    return None


class SlurmCluster:
    def __init__(self, cpus: int | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count()
        self.processes: dict[str, subprocess.Popen] = {}
        self.conf = self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment for the Slurm commands, which jobs inherit: without
        the State API address of a Ray instance this process started (the local_ray
        fixture's), which a job's own Ray would otherwise ask about its controllers."""
        return {**{key: value for key, value in os.environ.items() if key != API_SERVER_ENV},
                "SLURM_CONF": str(self.conf)}

    def start(self) -> SlurmCluster:
        try:
            self._start_munge()
            self._write_conf()
            for daemon in ("slurmctld", "slurmd"):
                self._start(daemon, [daemon, "-D", "-f", str(self.conf)])
            self._wait_until_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self) -> None:
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.dir / "munge").mkdir()
        # --force: munged refuses to run as root without it.
        self._start("munged", ["munged", "--foreground", "--force", f"--key-file={key}",
                               f"--socket={self.munge_socket}", f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                               f"--log-file={self.dir / 'munge' / 'munged.log'}",
                               f"--seed-file={self.dir / 'munge' / 'munged.seed'}"])
        deadline = time.time() + 30
        while not Path(self.munge_socket).exists():
            if time.time() > deadline or self.processes["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start: {self._log('munged')}")
            time.sleep(0.1)

    @property
    def munge_socket(self) -> str:
        return str(self.dir / "munge" / "munge.socket")

    def _write_conf(self) -> None:
        memory = psutil.virtual_memory().total // 2**20 - 2048
        for name in ("state", "spool", "logs"):
            (self.dir / name).mkdir()
        self.conf.write_text(f"""\
ClusterName=nmttest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SrunPortRange={free_port()}-{free_port()}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.dir / 'state'}
SlurmdSpoolDir={self.dir / 'spool'}
SlurmctldPidFile={self.dir / 'slurmctld.pid'}
SlurmdPidFile={self.dir / 'slurmd.pid'}
SlurmctldLogFile={self.dir / 'logs' / 'slurmctld.log'}
SlurmdLogFile={self.dir / 'logs' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=30
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "wb")
        self.processes[name] = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)

    def _log(self, name: str) -> str:
        texts = [path.read_text(errors="replace")[-2000:] for path in
                 (self.dir / f"{name}.out", self.dir / "logs" / f"{name}.log", self.dir / "munge" / f"{name}.log")
                 if path.is_file()]
        return "\n".join(texts)

    def _wait_until_idle(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({process.returncode}): {self._log(name)}")
            state = self.run("sinfo", "--noheader", "--format=%t", check=False).stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm node did not come up in {timeout:.0f} s: {self._log('slurmctld')}\n"
                           f"{self._log('slurmd')}")

    def run(self, *command: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(list(command), env=self.env, capture_output=True, text=True, timeout=120, cwd=cwd)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
        return done

    def sbatch(self, *args: str, cwd: Path) -> str:
        """Submit; the job's id."""
        return self.run("sbatch", "--parsable", *args, cwd=cwd).stdout.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        """PENDING, RUNNING, ...; '' once the controller has forgotten the job."""
        done = self.run("squeue", "--noheader", "--format=%T", f"--jobs={job}", check=False)
        return done.stdout.strip()

    def wait_for_state(self, job: str, states: set[str], timeout: float) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.job_state(job)
            if state in states or (not state and "" in states):
                return state
            time.sleep(1)
        raise TimeoutError(f"job {job} not in {states} after {timeout:.0f} s (now {self.job_state(job)!r})")

    def stop(self) -> list[str]:
        """End every job, then every daemon; the processes still alive after that."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            self.run("scancel", "--user=root", check=False)
            deadline = time.time() + 60  # KillWait: SIGTERM, then SIGKILL 30 s later
            while self.run("squeue", "--noheader", check=False).stdout.strip() and time.time() < deadline:
                time.sleep(1)
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.get(name)
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in psutil.process_iter()
                if _ours(p, str(self.dir))]
        shutil.rmtree(self.dir, ignore_errors=True)
        return left


def _ours(process: psutil.Process, directory: str) -> bool:
    """A Slurm or MUNGE process started for this cluster (its command line names our directory)."""
    try:
        return process.name() in DAEMONS and directory in " ".join(process.cmdline() + [str(process.environ())])
    except psutil.Error:
        return False
