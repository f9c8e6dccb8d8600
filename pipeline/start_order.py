"""The train stages' turns to ask for workers (``scheduler.WorkerTurns``), kept in a Ray
actor: the driver enqueues each train stage as it submits it, the stage's task waits
for its turn, and its rank-0 worker reports once the workers are placed.

A train stage whose workers can never be placed (a GPU the cluster lacks) holds up the
ones after it, as Ray itself would hold it up forever.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import ray

from pipeline.scheduler import WorkerTurns

POLL_S = 0.5


@ray.remote(num_cpus=0)
class StartOrder:
    """The driver's record of which train stages have their workers."""

    def __init__(self):
        self.turns = WorkerTurns()

    def enqueue(self, name: str) -> None:
        self.turns.enqueue(name)

    def may_start(self, name: str) -> bool:
        return self.turns.may_start(name)

    async def wait_for_turn(self, name: str) -> None:
        while not self.turns.may_start(name):
            await asyncio.sleep(POLL_S)

    def mark_started(self, name: str) -> None:
        self.turns.mark_started(name)


@dataclass(frozen=True)
class TrainingTurn:
    """One train stage's place in the order (``pipeline.core.context.WorkerTurn``):
    picklable, so its workers can report."""

    order: ray.actor.ActorHandle
    name: str

    def wait(self) -> None:
        """Blocks until every train stage before this one has its workers."""
        ray.get(self.order.wait_for_turn.remote(self.name))

    def started(self) -> None:
        """This stage has its workers, or will never need them (it ended or failed)."""
        ray.get(self.order.mark_started.remote(self.name))
