"""SIGTERM to ``nmt run`` (pipeline/driver_sigterm.py), in processes of their own: the
driver passes it on to the processes below it that train (Ray Train workers, and train
stage tasks that train themselves with train.in_process), waits for them, and its loop
then raises."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.trains  # processes standing in for training workers

# A process whose command line names it a Ray Train worker, or a train stage's task
# (Ray's title for it): on SIGTERM it takes a moment (its last update and checkpoint),
# then exits. Beside it, an evaluate stage's task, which is left alone. The worker says
# when its handler is in place: a SIGTERM before that would end it at once, and a
# loaded machine can take more than a second to start a Python process. The handler
# writes with os.write: a print could land while the main thread's own print still holds
# stdout's buffer (a "reentrant call" error under load).
WORKER = ("import os, signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.0), os.write(1, b'checkpointed\\n'), "
          "sys.exit(0)))\n"
          "print('worker handles SIGTERM', flush=True)\n"
          "time.sleep(60)\n")
DRIVER = """
import subprocess, sys, time
from pipeline.driver_sigterm import Terminated, raise_if_terminated, stop_on_sigterm
worker = subprocess.Popen({command}, executable=sys.executable)
bystander = subprocess.Popen([{bystander!r}, "-c", "import time; time.sleep(60)"], executable=sys.executable)
stop_on_sigterm()
print("ready", flush=True)
started = time.time()
try:
    for _ in range(600):  # as pipeline/runner.py's loop: a blocking wait, then the check
        time.sleep(0.1)
        raise_if_terminated()
except Terminated:
    print(f"terminated after the worker: {{worker.poll() == 0}} in {{time.time() - started:.1f}}", flush=True)
    print(f"evaluation left running: {{bystander.poll() is None}}", flush=True)
    bystander.kill()
"""
RAY_TRAIN_WORKER = ["python", "-c", WORKER, "RayTrainWorker"]
TRAIN_STAGE_TASK = ["ray::stage:train/m.s1", "-c", WORKER]


def _driver(grace: str, worker: list[str] = RAY_TRAIN_WORKER,
            bystander: str = "ray::stage:evaluate/m.s1") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER.format(command=repr(worker), bystander=bystander)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"NMT_SIGTERM_GRACE_S": grace, "PATH": "/usr/bin:/bin",
                                 **{k: v for k, v in __import__("os").environ.items() if k == "PYTHONPATH"}})


def _started(driver: subprocess.Popen) -> None:
    """Once the driver handles SIGTERM and its worker has its own handler in place."""
    seen = set()
    while seen != {"ready", "worker handles SIGTERM"}:
        line = driver.stdout.readline()
        assert line, driver.stderr.read()
        seen.add(line.strip())


@pytest.mark.parametrize("worker", [RAY_TRAIN_WORKER, TRAIN_STAGE_TASK], ids=["ray_train", "in_process"])
def test_sigterm_reaches_the_train_workers_and_the_driver_ends_once_they_have(worker):
    driver = _driver("25", worker)
    _started(driver)
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=30)
    assert "terminated after the worker: True" in out, err
    assert "checkpointed" in out  # the worker's own handler ran before the driver ended
    assert "evaluation left running: True" in out
    assert "asking 1 training worker(s) here to checkpoint" in err


def test_a_train_stage_task_that_drives_ray_train_workers_is_left_to_them():
    """Beside a Ray Train worker, the train stage's own task drives it (through the Ray
    Train controller it owns): SIGTERM would end it at once, and the worker with it, so
    only the worker is signalled; the task is left running until the run shuts down."""
    driver = _driver("25", RAY_TRAIN_WORKER, bystander="ray::stage:train/m.s1")
    _started(driver)
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=30)
    assert "terminated after the worker: True" in out and "checkpointed" in out, err
    assert "evaluation left running: True" in out  # the stage task, not signalled
    assert "asking 1 training worker(s) here to checkpoint" in err


def test_the_driver_waits_no_longer_than_its_grace():
    driver = _driver("0.2")
    _started(driver)
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=30)
    line = next(line for line in out.splitlines() if line.startswith("terminated"))
    assert line.startswith("terminated after the worker: False") and float(line.rsplit(" ", 1)[-1]) < 1.0, (out, err)
    assert "still running after 0 s" in err
