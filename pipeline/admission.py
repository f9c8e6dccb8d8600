"""Which stages that hold workers may start now, so that queued ones hold nothing.

A train stage's own task holds no CPU; its Ray Train workers ask for theirs. Started
all at once, every queued train stage would run its task (a Python process with torch
imported) and create its Ray Train controller and helper actors, then wait for workers:
in the default job, 9 stages held 30 Ray processes and about 10.5 GB while 2 computed,
and Ray warned of the worker processes it had to start. So the runner submits such a
stage (``Stage.worker_resources``) only once the cluster has its workers' resources
free of every other such stage's, in the plan's order: a stage that does not fit waits,
and the ones behind it wait too, so that a large run is not overtaken forever. A stage
larger than the whole cluster still starts when nothing else holds workers, and waits
in Ray as it would have.
"""

from __future__ import annotations


class Admission:
    def __init__(self, capacity: dict[str, float]):
        self.capacity = dict(capacity)  # the cluster's resources (ray.cluster_resources())
        self.held: dict[str, dict[str, float]] = {}  # stage -> its claim, while it runs

    def admits(self, claim: dict[str, float]) -> bool:
        """Whether a stage claiming ``claim`` fits beside the stages running now."""
        if not self.held:
            return True
        return all(sum(held.get(kind, 0.0) for held in self.held.values()) + amount
                   <= self.capacity.get(kind, 0.0) + 1e-9 for kind, amount in claim.items())

    def hold(self, stage: str, claim: dict[str, float]) -> None:
        self.held[stage] = dict(claim)

    def release(self, stage: str) -> None:
        self.held.pop(stage, None)

    def running(self) -> int:
        return len(self.held)
