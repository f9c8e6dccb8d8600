"""Which stages of a run start when: plain objects, no Ray, so every rule is a unit test.

The runner (``pipeline/runner.py``) submits what ``Scheduler.startable`` returns, tells
it which stages ended, and does nothing else about order. The rules:

- A stage is submitted once every upstream stage of this run is submitted: Ray holds
  its task until their results exist, and runs independent stages side by side.
- A stage that holds workers (a train or tune stage: its ``claim``) is submitted once
  its upstream stages have *ended* (a branched budget that continues another train
  stage would otherwise hold its claim idle), and once its claim fits beside the
  claims of those running (``pipeline/admission.py``); in plan order: once one does not
  fit, the ones behind it wait too, so that a large run is not overtaken forever.
- Train stages ask Ray for their workers in the order they were submitted
  (``WorkerTurns``): a train stage's task waits until every train stage submitted
  before it has its workers (or has ended). Ray places worker groups in the order
  they ask, and two asking within the same second race: in one run two models meant
  to share a core one after the other took both cores, and the model meant to have
  the other core waited 46 minutes. The turns live in a Ray actor
  (``pipeline/start_order.py``) because the stages' tasks ask them; the rule is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.admission import Admission


@dataclass(frozen=True)
class Job:
    """What the scheduler knows of a stage to run."""

    name: str
    upstream: tuple[str, ...]  # its upstream stages, of this run or cached
    claim: dict[str, float] | None = None  # its workers' resources, where it holds workers


class Scheduler:
    def __init__(self, jobs: list[Job], capacity: dict[str, float]):
        self.waiting = list(jobs)  # not submitted yet, in plan order
        self.in_run = {job.name for job in jobs}
        self.submitted: set[str] = set()
        self.ended: set[str] = set()  # finished or failed
        self.admission = Admission(capacity)

    def startable(self) -> list[Job]:
        """The waiting stages that may be submitted now, in plan order; each is taken
        off the waiting list, and its claim held until it ends."""
        started, blocked = [], False
        for job in list(self.waiting):
            if not self._upstream_done(job, self.submitted):
                continue
            if job.claim is not None:
                if not self._upstream_done(job, self.ended):
                    continue
                if blocked or not self.admission.admits(job.claim):
                    blocked = True  # the ones behind it wait their turn too
                    continue
                self.admission.hold(job.name, job.claim)
            self.waiting.remove(job)
            self.submitted.add(job.name)
            started.append(job)
        return started

    def end(self, name: str) -> None:
        """``name`` finished or failed: its claim is free, its dependents may start."""
        self.admission.release(name)
        self.ended.add(name)

    def check_all_started(self) -> None:
        """With nothing running, the first waiting stage is always admitted: a stage
        left waiting here is a bug in these rules, not a state to wait in."""
        if self.waiting:
            raise RuntimeError(f"stages never submitted: {', '.join(job.name for job in self.waiting)}")

    def _upstream_done(self, job: Job, done: set[str]) -> bool:
        return all(name in done for name in job.upstream if name in self.in_run)


class WorkerTurns:
    """Which train stages may ask for their workers: each after every train stage
    submitted before it has them (or has ended)."""

    def __init__(self):
        self.names: list[str] = []  # in submission order
        self.started: set[str] = set()

    def enqueue(self, name: str) -> None:
        """``name`` was submitted: it comes after every train stage submitted before it."""
        self.names.append(name)

    def may_start(self, name: str) -> bool:
        """Whether every train stage submitted before ``name`` has its workers. A stage not
        yet enqueued (its task asked before the runner's enqueue arrived) waits."""
        return name in self.names and self.started.issuperset(self.names[:self.names.index(name)])

    def mark_started(self, name: str) -> None:
        """``name`` has its workers, or will never need them (it ended or failed); marking
        twice (a worker group restarted) or before its turn is harmless."""
        self.started.add(name)
