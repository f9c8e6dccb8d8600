"""The local Ray instance's watcher (pipeline/instance_reaper.py), on plain processes: a
"driver" that starts it as nmt does, and a child of the driver that outlives it, as
Ray's agents outlived a SIGKILLed nmt run by about 60 s."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.trains  # starts and kills a driver's processes

DRIVER = """
import subprocess, time
from pipeline.instance_reaper import start_reaper
subprocess.Popen(["sleep", "300"], start_new_session=True)  # lives on when its parent dies
start_reaper()
print("started", flush=True)
time.sleep(300)
"""


def ended(process: psutil.Process) -> bool:
    """Gone, or dead and waiting for a parent to collect it (this machine's init may not)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_driver_s_descendants_are_killed_and_nothing_else():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, cwd=REPO)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        assert driver.stdout.readline() == "started\n"
        orphan, reaper = sorted(psutil.Process(driver.pid).children(), key=lambda child: child.name() != "sleep")
        time.sleep(2)  # the watcher has looked at the driver's children
        assert not ended(reaper)  # it waits while the driver lives
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 30
        while not (ended(orphan) and ended(reaper)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ended(orphan) and ended(reaper)  # the watcher, which the driver started too, last
        assert bystander.poll() is None
    finally:
        for process in (driver, bystander):
            process.kill()
            process.wait()
