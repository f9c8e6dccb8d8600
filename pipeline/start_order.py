"""Train stages start in the config's order when they compete for the cluster.

Every train stage's task starts at once (it holds no CPUs itself) and asks Ray Train
for its workers; Ray places the worker groups in the order they ask. Asked within the
same second, that order is a race. In one run of the converged config the two models
meant to share one core one after the other took both cores, and the model meant to
have the other core for the whole run waited 46 minutes for it. So a train stage asks
for its workers only once every train stage before it in the config has its own
workers (or has ended): the order the runner submits them in (the config's, as far
as ``pipeline/admission.py`` and their upstream stages allow) is the order workers are
placed in.

A train stage whose workers can never be placed (a GPU the cluster lacks) holds up the
ones after it, as Ray itself would hold it up forever.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import ray

POLL_S = 0.5


@ray.remote(num_cpus=0)
class StartOrder:
    """The driver's record of which train stages have their workers."""

    def __init__(self):
        self.names, self.started = [], set()

    def enqueue(self, name: str) -> None:
        """``name`` was submitted: it comes after every train stage submitted before it."""
        self.names.append(name)

    def may_start(self, name: str) -> bool:
        """Whether every train stage submitted before ``name`` has its workers (or has ended)."""
        return name in self.names and self.started.issuperset(self.names[:self.names.index(name)])

    async def wait_for_turn(self, name: str) -> None:
        while not self.may_start(name):
            await asyncio.sleep(POLL_S)

    def mark_started(self, name: str) -> None:
        self.started.add(name)


@dataclass(frozen=True)
class TrainingTurn:
    """One train stage's place in the order: picklable, so its workers can report."""

    order: ray.actor.ActorHandle
    name: str

    def wait(self) -> None:
        """Blocks until every train stage before this one has its workers."""
        ray.get(self.order.wait_for_turn.remote(self.name))

    def started(self) -> None:
        """This stage has its workers, or will never need them (it ended or failed)."""
        ray.get(self.order.mark_started.remote(self.name))
