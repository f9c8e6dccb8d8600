"""A stand-in for another job's training on a shared node: a Ray actor named as Ray
Train's workers are (``RayTrainWorker``), in a Ray instance of its own, that writes
MARKER if it is ever sent SIGTERM. A preemption handler that signals every process of
that name on the node signals it too.

    python -m tests.bystander_training MARKER TEMP_DIR

prints "ready" once the actor has its handler, then runs until it is killed.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import ray


@ray.remote(num_cpus=0)
class RayTrainWorker:
    def __init__(self, marker: str):
        def signalled(number, frame):
            Path(marker).write_text(f"signal {number}\n")

        signal.signal(signal.SIGTERM, signalled)

    def ready(self) -> bool:
        return True


def main(marker: str, temp_dir: str) -> None:
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp_dir)
    worker = RayTrainWorker.remote(marker)
    ray.get(worker.ready.remote())
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
