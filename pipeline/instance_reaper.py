"""The local Ray instance ends with the process that started it, even when that one is
killed outright.

A driver that starts its own instance (``nmt run`` or ``nmt serve`` without
``--address``) stops it on the way out. Killed with SIGKILL (the OOM killer, ``kill
-9``), it cannot: Ray's GCS, raylet and workers notice within seconds and exit, but its
dashboard agent and runtime-environment agent lived on for about 60 s more (measured on
2 cores). So the driver starts this watcher, in a session of its own so that a Ctrl-C
or a signal to the driver's process group does not reach it: it notes the driver's
descendants once a second while the driver lives, and once the driver is gone, however
it went, lets Ray stop as it would: it waits for the instance's raylet and GCS to end
(Ray's workers end with them), gives the rest ``GRACE_S`` more, and kills those left.
Killing sooner cost a training stopped by SIGTERM its last checkpoint: killed 2 s after
the driver's exit, a process was still needed for it (7 updates lost, in
benchmarks/orchestration/faults.py's term case).

    python -m pipeline.instance_reaper DRIVER_PID      # started by runner.connect_ray
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

RAY_EXIT_S = 30.0  # at most, for the raylet and GCS to end once the driver is gone
GRACE_S = 5.0  # then, for the rest: Ray's workers ended within 4 s of a killed driver
POLL_S = 1.0
INSTANCE = ("raylet", "gcs_server")  # the processes whose end ends a Ray instance


_started: dict[int, subprocess.Popen] = {}  # by the pid it watches: one is enough


def start_reaper() -> subprocess.Popen:
    """The watcher of this process and its descendants, started once per process (a
    test process starts and stops many instances)."""
    if os.getpid() not in _started:
        _started[os.getpid()] = subprocess.Popen(
            [sys.executable, "-m", "pipeline.instance_reaper", str(os.getpid())], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    return _started[os.getpid()]


def reap_after(driver_pid: int) -> list[int]:
    """Waits for ``driver_pid`` to end, then kills its descendants (as seen while it
    lived) still running ``GRACE_S`` after the instance's raylet and GCS have ended; the
    pids it killed."""
    import psutil

    try:
        driver = psutil.Process(driver_pid)
    except psutil.NoSuchProcess:
        return []
    seen: dict[tuple[int, float], psutil.Process] = {}  # by pid and start time: pids are reused
    while True:
        try:
            children = driver.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for child in children:
            if child.pid == os.getpid():  # the driver started this watcher: not one to kill before the rest
                continue
            try:
                seen.setdefault((child.pid, child.create_time()), child)
            except psutil.Error:  # one that ended meanwhile (a zombie raises too): not the driver
                pass
        try:
            if driver.status() == psutil.STATUS_ZOMBIE:  # dead, its parent not told yet
                break
            driver.wait(timeout=POLL_S)
            break
        except psutil.TimeoutExpired:
            continue
        except psutil.NoSuchProcess:
            break
    instance = [process for process in seen.values() if _name(process) in INSTANCE]
    deadline = time.monotonic() + RAY_EXIT_S
    while not all(map(_ended, instance)) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(GRACE_S)
    killed = []
    for process in seen.values():
        try:
            if process.is_running():  # the same process: psutil compares its start time, so no reused pid
                process.kill()
                killed.append(process.pid)
        except psutil.Error:
            pass
    return killed


def _name(process) -> str:
    import psutil

    try:
        return process.name()
    except psutil.Error:
        return ""


def _ended(process) -> bool:
    """Gone, or dead and not yet collected by its parent."""
    import psutil

    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


if __name__ == "__main__":
    reap_after(int(sys.argv[1]))
