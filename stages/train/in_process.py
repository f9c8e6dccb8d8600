"""``train.in_process``: one CPU worker, run in the train stage's own process.

Ray Train starts a controller, a placement group, a synchronization actor and a worker
process for every fit, each importing Ray Train (and the worker torch and DeepSpeed):
a stage's fixed cost of 11.4 s against 0.2 s here on a 2-core machine
(benchmarks/reports/2026-11-28_in_process_training_epyc_zen4.md), more when the stage
waits for its placement group beside evaluations. For runs of a few seconds
to a few minutes (a study's small budgets, tuning trials) that is most of the stage.
Here the stage's task calls the same worker function (``bootstrap.train_worker``) itself,
with a session that persists checkpoints into the same run directory (``session.py``):
the same updates, checkpoints and outputs, without those processes.

What it gives up, and what stands in:
- A crashed attempt is restarted here, from its newest complete checkpoint, up to
  ``train.max_failures`` times, as Ray Train would; a killed process is not (the next
  ``nmt run`` resumes it, as for any train stage).
- SIGTERM: the stage's task installs preemption.py's handler when it runs on its
  process's main thread (a stage task does), and ``nmt run`` passes SIGTERM on to it
  (pipeline/driver_sigterm.py): the update under way is finished and checkpointed, then
  the process ends. A tuning trial runs on a thread of Ray Tune's: no handler there.
- torch.distributed: DeepSpeed needs a process group; a gloo group of one process is
  started once per process and kept, since Ray runs later stages in the same process.
"""

from __future__ import annotations

import os
import threading

from stages.train import preemption
from stages.train.bootstrap import WorkerArgs, train_worker
from stages.train.session import InProcessSession


def fit(args: WorkerArgs, session: InProcessSession, max_failures: int) -> None:
    """Train as the only worker, retrying a failed attempt from its newest checkpoint
    up to ``max_failures`` times (-1: without end, as Ray Train's ``FailureConfig``)."""
    _one_process_group()
    if threading.current_thread() is threading.main_thread():
        preemption.install()
    preemption.REQUESTED.clear()  # a SIGTERM to an earlier stage of this process is not this one's
    failures = 0
    while True:
        try:
            train_worker({"args": args, "session": session})
            return
        except preemption.Preempted:
            # Checkpointed on SIGTERM: this process ends, as a Ray Train worker's would;
            # the next attempt is the next `nmt run`'s.
            preemption.end_process()
            raise
        except Exception:
            failures += 1
            if 0 <= max_failures < failures:
                raise


def _one_process_group() -> None:
    """A gloo process group of this process alone (rank 0 of 1), once per process:
    DeepSpeed's engine and the loop's all-reduces run over it."""
    import torch.distributed as dist

    # Where DeepSpeed looks for its device index, on every call: whatever started a group
    # before in this process may have set it and taken it away again.
    os.environ.setdefault("LOCAL_RANK", "0")
    if dist.is_initialized():
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
