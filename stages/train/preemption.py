"""SIGTERM to a training worker: finish the update under way, checkpoint, stop.

Slurm's time limit and preemption, Kubernetes' eviction and a spot instance's notice
all send SIGTERM first and SIGKILL a grace period later (30 s by default on
Kubernetes). Ray's own handler ends the worker process at once, losing every update
since the last periodic checkpoint. A train stage's workers replace it (``install``,
run on each worker's main thread by ``stages/train/ray_trainer.py``): while the loop
trains, SIGTERM only sets ``REQUESTED``; the loop (loop.py) agrees on it with the other
workers after the update under way, writes a checkpoint of that update to the store and
raises ``Preempted``. The stage then resumes from that checkpoint, on Ray Train's next
attempt or the next ``nmt run``. Outside the loop, SIGTERM does what Ray's handler did.
"""

from __future__ import annotations

import signal
import sys
import threading

REQUESTED = threading.Event()  # a SIGTERM arrived while the loop trained
TRAINING = threading.Event()  # the loop is between updates it will check REQUESTED after
_ray_handler = signal.SIG_DFL


class Preempted(RuntimeError):
    """Training stopped on SIGTERM after a complete checkpoint: resume from it."""


def install() -> None:
    """Handle SIGTERM in this worker process (call on its main thread)."""
    global _ray_handler
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    if previous is not _on_sigterm:  # installed once per process, whatever calls it again
        _ray_handler = previous


def end_process() -> None:
    """End this process as SIGTERM would have without our handler: outside the loop, and
    after a preemption's checkpoint in a process that trained in a stage's own task
    (in_process.py), so that ``nmt run``, which waits for the processes it signalled,
    sees it end."""
    _as_without_us(int(signal.SIGTERM), None)


def _on_sigterm(signum, frame) -> None:
    if TRAINING.is_set():
        if not REQUESTED.is_set():
            print("SIGTERM: finishing the update under way, then checkpointing and stopping", file=sys.stderr,
                  flush=True)
        REQUESTED.set()
        return
    _as_without_us(signum, frame)


def _as_without_us(signum, frame) -> None:
    if callable(_ray_handler):
        _ray_handler(signum, frame)
    else:  # no handler before ours: die of the signal, as without one
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
