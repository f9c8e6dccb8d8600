"""The SIGTERM handler of a training worker (stages/train/preemption.py), in a process of
its own: while training, SIGTERM asks the loop to stop; otherwise it does what the
handler before it did."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, signal, sys, time
from stages.train import preemption
calls = []
signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))  # as Ray's own handler
preemption.install()
preemption.install()  # a second worker group in the same process: still one handler, Ray's behind it
preemption.TRAINING.set()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.1)
print("training:", preemption.REQUESTED.is_set(), calls)
preemption.TRAINING.clear()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.1)
print("idle:", calls)
"""


def test_sigterm_while_training_only_asks_the_loop_to_stop_and_otherwise_reaches_ray_s_handler():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["training: True []", f"idle: [{15}]"]
    assert "SIGTERM: finishing the update under way" in done.stderr


def test_without_a_handler_before_it_sigterm_outside_training_ends_the_process():
    code = ("import os, signal, time\nfrom stages.train import preemption\n"
            "signal.signal(signal.SIGTERM, signal.SIG_DFL)\npreemption.install()\n"
            "os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\nprint('survived')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -15 and "survived" not in done.stdout
