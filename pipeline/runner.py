"""Executing a plan: each stage that is not cached runs as a Ray task.

``run_pipeline`` submits what the scheduler (``pipeline/scheduler.py``) says may start
as Ray tasks (``StageTasks``), waits for one to end, tells the scheduler, and hands the
stage's result (or failure) to the caller, which records it in MLflow
(``pipeline/run_recorder.py``). ``execute_stage``, the body of each task, commits the
stage's artifact.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

import ray

from pipeline.cluster_address import check_in_child
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.core.context import DownloadSources, RayTasks, StageContext, TrainingPlacement, WorkerTurn, ray_progress
from pipeline.core.hardware import CPU_BF16_ENV
from pipeline.core.leases import held
from pipeline.core.progress_lines import PROGRESS_ENV, choose_progress_style
from pipeline.core.timeline import ENV as TIMELINE_ENV, mark
from pipeline.driver_sigterm import raise_if_terminated
from pipeline.graph import PlannedStage
from pipeline.instance_reaper import start_reaper
from pipeline.ray_output import filter_worker_output
from pipeline.scheduler import Job, Scheduler
from pipeline.stage import Stage
from pipeline.start_order import StartOrder, TrainingTurn

# Where Ray's State API clients (ray.util.state) send their requests.
API_SERVER_ENV = "RAY_API_SERVER_ADDRESS"
# Ray Train's preemption watcher: an actor per train stage that asks Ray whether a node
# is being drained, so that a run on a cluster stops cleanly before a node goes away.
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"

log = logging.getLogger("nmt")


@dataclass
class StageResult:
    name: str
    key: str
    cache_hit: bool
    metrics: dict = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    size_bytes: int = 0


def execute_stage(stage: Stage, section, key: str, upstream_keys: dict[str, str], store: ArtifactStore,
                  mirrors: list[str], metrics_sink: Callable | None, training_turn: WorkerTurn | None,
                  *upstream_results: StageResult, forced: bool = False) -> StageResult:
    """Run one stage and commit its artifact; the body of each stage's Ray task.
    ``forced``: recompute and replace the artifact even if it is committed (``--force``).

    ``upstream_results`` are not read: passing the upstream ObjectRefs as arguments is
    what makes Ray wait for those stages before starting this one.
    """
    started = time.time()
    # Another run of the same key (a second driver on the same store) computes it first,
    # and this one then finds its artifact: one writer per key (pipeline/core/leases.py).
    with held(store.lease(stage.name, key), on_wait=_waiting_for(stage.name)) as lease:
        done = store.status(stage.name, key)
        if done.state == ArtifactState.CACHED and not forced:
            if training_turn is not None:
                training_turn.started()
            metrics = (store.read_manifest(stage.name, key) or {}).get("metrics", {})
            return StageResult(stage.name, key, True, metrics, started, time.time(), done.size_bytes)
        inputs = {name: store.local_path(name, upstream_key, stage.reads.get(name))
                  for name, upstream_key in upstream_keys.items()}
        mark(stage.name, "task started")
        staging = store.staging_dir(stage.name, key, keep_previous=stage.resumable)
        fetchers = {name: functools.partial(store.local_path, name, upstream_key, stage.reads.get(name))
                    for name, upstream_key in upstream_keys.items()}
        ctx = StageContext(tasks=RayTasks(), progress=ray_progress, input_fetchers=fetchers,
                           metrics_sink=metrics_sink, resources=stage_resources(stage, store, key, mirrors,
                                                                                training_turn))
        mark(stage.name, "inputs ready")
        try:
            metrics = stage.run(inputs, section, staging, ctx)
        finally:
            if training_turn is not None:  # its workers started, or never will: the next train stage may ask
                training_turn.started()
        lease.check()
        status = store.commit(stage.name, key, staging, {
            "version": stage.version, "config": section.model_dump(mode="json"),
            "upstream": upstream_keys, "metrics": metrics,
        }, replace=forced)
    mark(stage.name, "committed")
    return StageResult(stage.name, key, False, metrics, started, time.time(), status.size_bytes)


def _waiting_for(stage: str) -> Callable[[dict], None]:
    """What a stage task says while another run holds its key: once, then every minute."""
    said = [0.0]

    def report(lease: dict) -> None:
        if time.time() - said[0] >= 60:
            said[0] = time.time()
            print(f"{stage}: waiting for {lease.get('holder', 'another run')}, which is computing the same "
                  "artifact", flush=True)
    return report


def stage_resources(stage: Stage, store: ArtifactStore, key: str, mirrors: list[str],
                    training_turn: WorkerTurn | None) -> DownloadSources | TrainingPlacement | None:
    """What only ``stage`` uses, of the type its package names (``Stage.resources``)."""
    if stage.resources is DownloadSources:
        return DownloadSources(mirrors=mirrors)
    if stage.resources is TrainingPlacement:
        return TrainingPlacement(store.durable_staging(stage.name, key) if stage.resumable else None, training_turn)
    return None


def connect_ray(address: str | None) -> None:
    """Join the cluster at ``address`` (or RAY_ADDRESS), else start an embedded local
    instance. ``ClusterUnreachable`` within seconds where no head answers there or it
    refuses our token (Ray itself would retry for minutes)."""
    if ray.is_initialized():
        return
    if address or os.environ.get("RAY_ADDRESS"):
        check_in_child(address or os.environ["RAY_ADDRESS"])
    options: dict = {}
    # Train stages that wait for CPUs or GPUs held by other train stages are normal
    # here, not a startup failure to report every minute.
    env_vars = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(7 * 24 * 3600),
                # torch backs its CPU allocations of 2 MB and more with huge pages. A
                # training step allocates its large activations afresh each time; faulting
                # them in 4 KB pages cost 11% of a step of Transformer small on a 2-core VM
                # (benchmarks/training/train_throughput.py).
                "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "1"),
                # Workers draw bars, or print progress lines, as this driver's output calls for.
                PROGRESS_ENV: choose_progress_style(),
                # Ray Train routes a worker's print() through a logger that adds a newline:
                # Ray's bars, which print their state with one already, then left an empty
                # line on the driver's terminal at every redraw (a line every ten updates)
                # instead of redrawing in place.
                "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
                # How often Ray Train's controller polls its workers (default 2 s): it notices
                # the end of training a poll late. At 0.25 s a stage's last update to its
                # commit took 1.0 s instead of 4.5 on a 2-core CPU (benchmarks/orchestration/stage_overhead.py).
                "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")}
    if CPU_BF16_ENV in os.environ:  # workers on other nodes decide precision as this driver was told to
        env_vars[CPU_BF16_ENV] = os.environ[CPU_BF16_ENV]
    # Every process marks where a stage's time goes (benchmarks/orchestration/stage_overhead.py).
    if TIMELINE_ENV in os.environ:
        env_vars[TIMELINE_ENV] = os.environ[TIMELINE_ENV]
    runtime_env: dict | None = None
    if address or os.environ.get("RAY_ADDRESS"):
        import pipeline
        import stages

        # Ship this checkout's code and settings to the cluster so its workers run what
        # the driver runs. As directories, not module objects: a driver started by
        # `ray job submit` merges this with the job's runtime_env by deep copy, which
        # cannot copy a module.
        runtime_env = {"env_vars": env_vars,
                       "py_modules": [os.path.dirname(module.__file__) for module in (pipeline, stages)]}
    else:
        # Without an address Ray would join the cluster last started on this machine
        # (`ray start`, another tool's): a local instance of our own is what was asked for.
        address = "local"
        options["dashboard_port"] = point_state_api_at_own_dashboard()
        # The local instance's processes inherit this one's environment. A job-level
        # runtime_env would do the same, but makes Ray start every worker through its
        # runtime-env setup instead of from its pool of ready workers: about 0.7 s more
        # per actor on a 2-core CPU, and a train stage starts about seven of them.
        os.environ.update(env_vars)
        # An instance of one machine has no node to drain: without the watcher's actor a
        # small train stage took 29 s instead of 34 on a 2-core CPU (its process, imports
        # and polling). A user's own setting wins.
        os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
        # Ray enables token authentication for a local instance and warns so on every
        # start; there is nothing for a user to do (its token is made and used by Ray).
        # Setting RAY_AUTH_MODE here instead is too late: ray has read its config.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING, log_to_driver=True,
             **options)
    if address == "local":  # ours: it ends with this process, however that ends
        start_reaper()
    filter_worker_output()


def point_state_api_at_own_dashboard() -> int:
    """A port for the local instance's dashboard, which serves Ray's State API, named to
    every process of the instance in RAY_API_SERVER_ADDRESS (its raylet and workers
    inherit this process's environment). Ray Train's placement-group cleaner asks the
    State API, once a second, whether its controller lives; given no address, the State
    API client looks for a cluster on the machine (the last `ray start`, any running
    GCS) and may find another one (a second `nmt run`, a user's own cluster, one killed
    or stopped); where that one does not answer, the cleaner waits out a 10 s timeout
    and every train stage ended 12-15 s late (tests/e2e/test_local_ray.py)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ[API_SERVER_ENV] = f"http://127.0.0.1:{port}"
    return port


def run_pipeline(planned: list[PlannedStage], store: ArtifactStore, mirrors: list[str],
                 on_result: Callable[[PlannedStage, StageResult], None],
                 on_failure: Callable[[PlannedStage, BaseException], None],
                 on_submit: Callable[[PlannedStage], Callable | None] = lambda item: None) -> list[StageResult]:
    """Run the planned stages that are not cached, each when the scheduler says
    (``pipeline/scheduler.py``); ``on_result`` sees every stage, hits included.
    ``on_submit`` may return a metrics sink the stage can log to as it runs."""
    results = [_cached_result(item, store, on_result) for item in planned if not item.will_run]
    to_run = {item.stage.name: item for item in planned if item.will_run}
    if not to_run:  # Ray is started only when something runs: a cached run has no cluster to ask
        return results
    tasks = StageTasks(store, mirrors, on_submit, list(to_run.values()))
    scheduler = Scheduler([tasks.job(item) for item in to_run.values()], tasks.capacity)
    # After a failure, stages that do not depend on it run to completion: their
    # artifacts are committed, so the next run resumes from them.
    failed: dict[str, BaseException] = {}
    try:
        while True:
            for job in scheduler.startable():
                tasks.submit(to_run[job.name])
            if not tasks.running:
                break
            item, outcome = tasks.next_ended()
            scheduler.end(item.stage.name)
            if isinstance(outcome, BaseException):
                failed[item.stage.name] = outcome
                on_failure(item, outcome)
            else:
                on_result(item, outcome)
                results.append(outcome)
    except KeyboardInterrupt:
        tasks.stop()
        raise
    scheduler.check_all_started()
    if failed:
        root_causes = [error for error in failed.values() if not isinstance(error, UpstreamFailed)]
        raise (root_causes or list(failed.values()))[0]
    return results


def _cached_result(item: PlannedStage, store: ArtifactStore,
                   on_result: Callable[[PlannedStage, StageResult], None]) -> StageResult:
    """A hit reports the metrics its artifact was made with, so every run's record is whole."""
    manifest = store.read_manifest(item.stage.name, item.key) or {}
    result = StageResult(item.stage.name, item.key, True, manifest.get("metrics", {}),
                         size_bytes=item.status.size_bytes)
    on_result(item, result)
    return result


class StageTasks:
    """The Ray side of a run: a task per stage, its result or failure, Ctrl-C.

    Each stage's task receives its upstream tasks' ObjectRefs as arguments, so Ray starts
    it once their results exist. Train stages, when more than one runs, wait for their
    turn to ask for workers (``pipeline/start_order.py``), enqueued as they are submitted.
    """

    def __init__(self, store: ArtifactStore, mirrors: list[str], on_submit: Callable[[PlannedStage], Callable | None],
                 to_run: list[PlannedStage]):
        self.store, self.mirrors, self.on_submit = store, mirrors, on_submit
        self.task = ray.remote(execute_stage)
        self.refs: dict[str, ray.ObjectRef] = {}  # every stage submitted, by name
        self.pending: dict[ray.ObjectRef, PlannedStage] = {}  # those not ended
        # The cluster's resources, which stages that hold workers are admitted against.
        self.capacity = ray.cluster_resources() if any(item.stage.worker_resources for item in to_run) else {}
        self.training = [item.stage.name for item in to_run if item.stage.group == "train"]
        self.start_order = StartOrder.remote() if len(self.training) > 1 else None

    @property
    def running(self) -> bool:
        return bool(self.pending)

    def job(self, item: PlannedStage) -> Job:
        """What the scheduler needs of ``item``: its upstream stages, its workers' claim."""
        stage = item.stage
        claim = stage.worker_resources(item.section, self.capacity) if stage.worker_resources else None
        return Job(stage.name, tuple(stage.upstream), claim)

    def submit(self, item: PlannedStage) -> None:
        upstream_refs = [self.refs[name] for name in item.stage.upstream if name in self.refs]
        section = item.section
        turn = None
        if self.start_order and item.stage.name in self.training:
            # Waited for, so that the stage's own wait for its turn finds it listed.
            ray.get(self.start_order.enqueue.remote(item.stage.name))
            turn = TrainingTurn(self.start_order, item.stage.name)
        ref = self.task.options(name=f"stage:{item.stage.name}", num_cpus=item.stage.cpus_of_task(section)).remote(
            item.stage, section, item.key, item.upstream_keys, self.store, self.mirrors, self.on_submit(item), turn,
            *upstream_refs, forced=item.status.state == ArtifactState.CACHED)  # planned to run though cached: --force
        self.refs[item.stage.name] = ref
        self.pending[ref] = item
        log.info("%-9s submitted (key %s)", item.stage.name, item.key)

    def next_ended(self) -> tuple[PlannedStage, StageResult | BaseException]:
        """The next stage to end, with its result or why it failed (``UpstreamFailed``
        where it did not run because an upstream stage failed)."""
        while True:
            # A second at a time: SIGTERM (pipeline/driver_sigterm.py) ends the run between waits.
            done, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0)
            raise_if_terminated()
            if done:
                break
        item = self.pending.pop(done[0])
        try:
            return item, ray.get(done[0])
        except Exception as error:
            # Ray hands a stage its upstream's exception, and may report the downstream
            # stage first: look at the upstream refs, not at the order of reports.
            upstream = _failed_upstream(item.stage, self.refs)
            return item, (UpstreamFailed(f"not run: upstream stage {upstream!r} failed") if upstream
                          else getattr(error, "cause", None) or error)

    def stop(self) -> None:
        """At Ctrl-C: end the stage tasks still running, and the Ray Train runs they own,
        before the driver closes its MLflow runs. Left running until the driver exits,
        they go on logging live metrics to the SQLite store the driver is closing the
        runs in (a CI run's Ctrl-C once took over 120 s to end; this was the likely
        cause, not a proven one). What they had checkpointed stays in their staging
        directories for the next run."""
        # Not a task whose result is in: cancelling one as its reply arrives trips a fatal
        # check in Ray's core worker ("it != submissible_tasks_.end()", ray-project/ray#54846;
        # seen with Ray 2.60 at a Ctrl-C right after a stage committed), and the driver dies
        # with exit status 1 instead of saying what it kept.
        finished, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
        for ref in set(self.pending) - set(finished):
            try:
                ray.cancel(ref, force=True, recursive=True)
            except Exception as error:  # one already ended
                log.debug("cancelling a stage task: %s", error)


def _failed_upstream(stage: Stage, refs: dict) -> str | None:
    """The first direct upstream stage of ``stage`` whose task failed in this run."""
    for name in stage.upstream:
        ref = refs.get(name)
        if ref is None or not ray.wait([ref], timeout=0)[0]:
            continue
        try:
            ray.get(ref)
        except Exception:
            return name
    return None


class UpstreamFailed(Exception):
    pass
