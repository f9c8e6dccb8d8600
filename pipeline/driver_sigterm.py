"""SIGTERM to ``nmt run``: let the training on this machine checkpoint, then stop cleanly.

Slurm's time limit, ``scancel``, a Kubernetes eviction and a spot notice send SIGTERM
first. Python's default would end the driver at once: its stages' MLflow runs left
RUNNING and, with a local Ray instance, Ray's processes left running without it. Here
SIGTERM is passed on to the Ray Train workers that run on this machine (each finishes
the update under way and writes a checkpoint of it: stages/train/preemption.py), the
driver waits for them up to ``grace`` seconds, and then ends as an interrupted run: its
open stages marked KILLED, Ray shut down, exit status 143. Workers on other nodes get
their own SIGTERM from whatever preempts those nodes (cluster/slurm.sbatch passes
Slurm's early signal on to every node's workers).
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import psutil

GRACE_ENV = "NMT_SIGTERM_GRACE_S"
DEFAULT_GRACE_S = 25.0  # inside Kubernetes' default 30 s between SIGTERM and SIGKILL
TRAIN_WORKER = "RayTrainWorker"  # in the command line Ray gives a train worker's process
# ... and a train stage's task, which trains in its own process with train.in_process
TRAIN_STAGE_TASK = "ray::stage:train/"

log = logging.getLogger("nmt")


class Terminated(Exception):
    """``nmt run`` got SIGTERM; the training on this machine has checkpointed (or ran out of time)."""


def training_workers_below(pid: int | None = None) -> list[psutil.Process]:
    """Processes that train below process ``pid`` (this one by default: a local Ray
    instance's), skipping any that end while they are looked at: the Ray Train workers,
    or where there are none, the train stage tasks, which then train themselves
    (train.in_process). A stage task that drives Ray Train workers is not one: SIGTERM
    ends it at once (Ray's handler), and the Ray Train controller it owns with it, which
    took its workers down before they had checkpointed (the fault matrix's SIGTERM to
    ``nmt run`` after update 3 lost 3 to 6 updates in 3 of 5 tries)."""
    workers, stage_tasks = [], []
    for process in psutil.Process(pid or os.getpid()).children(recursive=True):
        try:
            command = " ".join(process.cmdline())
            if TRAIN_WORKER in command:
                workers.append(process)
            elif command.startswith(TRAIN_STAGE_TASK):
                stage_tasks.append(process)
        except psutil.Error:
            pass
    return workers or stage_tasks


_terminated = threading.Event()  # SIGTERM arrived, and the workers here have checkpointed


def stop_on_sigterm() -> None:
    """From now on, SIGTERM to this process makes ``raise_if_terminated`` raise, once the
    Ray Train workers below it have checkpointed and exited (or ``NMT_SIGTERM_GRACE_S``
    passed). The handler itself never raises: it runs inside whatever call the main
    thread is blocked in, and an exception raised inside ``ray.wait`` comes out of it
    as a SystemError, with the driver left running while Ray Train restarts the
    training it had just stopped."""
    _terminated.clear()
    signal.signal(signal.SIGTERM, _on_sigterm)


def raise_if_terminated() -> None:
    """Raise ``Terminated`` if SIGTERM arrived: call it between the blocking calls of a
    loop (pipeline/runner.py waits on its stages a second at a time)."""
    if _terminated.is_set():
        raise Terminated("stopped by SIGTERM")


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: a second must not cut the wait short
    grace = float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))
    workers = training_workers_below()
    if workers:
        log.warning("SIGTERM: asking %d training worker(s) here to checkpoint the update under way (up to %.0f s)",
                    len(workers), grace)
        for worker in workers:
            try:
                worker.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(workers, timeout=grace)
        if alive:
            log.warning("SIGTERM: %d training worker(s) still running after %.0f s", len(alive), grace)
    _terminated.set()
