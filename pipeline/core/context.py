"""What the runner hands a stage besides its inputs and config slice.

A stage fans work out through ``ctx.tasks``: under the runner each call is a Ray task,
placed on any node of the cluster; when a stage is called directly, as tests do, it is
a plain call in this process. ``ctx.parallel_map`` maps over a list; ``in_order`` keeps
a bounded number of tasks in flight and yields their results in order, so a stage's
memory does not grow with its input. ``ctx.progress`` draws a progress bar (on the
driver when running under Ray).

What only one stage needs comes as ``ctx.resources``, of the type the stage's package
names as ``RESOURCES``: ``DownloadSources`` for download, ``TrainingPlacement`` for
train; None for the others.
"""

from __future__ import annotations

import functools
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Protocol, TypeVar

from tqdm.auto import tqdm

from pipeline.core.artifacts import default_cache_dir
from pipeline.core.progress_lines import LineProgress, lines_wanted

MAX_TASKS_IN_FLIGHT = 64


@dataclass
class DownloadSources:
    """Where the download stage finds files besides the network."""

    # Directories searched for pinned files before any download (config `mirrors`, NMT_MIRROR).
    mirrors: list[str] = field(default_factory=list)
    # Where verified downloads are kept, by sha256, across runs and configs.
    cache: Path = field(default_factory=lambda: default_cache_dir() / "downloads")


class WorkerTurn(Protocol):
    """A train stage's turn to ask for workers, in the order the runner submitted the
    train stages (``pipeline/scheduler.py``); picklable, so its workers can report."""

    def wait(self) -> None:
        """Return once every train stage submitted before this one has its workers."""

    def started(self) -> None:
        """This stage has its workers, or will never need them (it ended or failed)."""


@dataclass
class TrainingPlacement:
    """Where a train stage keeps its checkpoints and when it may ask for workers."""

    # The stage's staging place on an object store, as (filesystem, path): checkpoints
    # kept there survive the node. None when the store is local, where the stage's own
    # output directory is already on the store.
    durable_staging: tuple[Any, str] | None = None
    # The stage's place in the order workers are placed in; None where it need not wait
    # (outside ``nmt run``, or the run's only train stage).
    turn: WorkerTurn | None = None
    # Ray Train callbacks of the run (a tuning trial's, which passes its workers'
    # reports on to Ray Tune: stages/tune/trials.py).
    callbacks: tuple = ()
    # What a run in the stage's own process (train.in_process) hands each checkpoint's
    # metrics to: a tuning trial's ``ray.tune.report``; None: nothing.
    report_to_tune: Any = None


class MetricsSink(Protocol):
    """Where a stage records rows with a ``step`` (a training curve) while it runs, from
    any process it starts (pipeline/metrics_sink.py's ``RelayedSink`` under ``nmt run``)."""

    def __call__(self, rows: list[dict]) -> None:
        """Record ``rows``; may return before they are recorded."""

    def drain(self) -> None:
        """Return once every row this process passed is recorded: a stage's process
        calls it before its stage may end."""


ResourcesT = TypeVar("ResourcesT")


@dataclass
class StageContext(Generic[ResourcesT]):
    # Where fanned-out work runs: InlineTasks (this process) or RayTasks (the cluster).
    tasks: InlineTasks | RayTasks = field(default_factory=lambda: InlineTasks())
    progress: Callable[..., Any] = tqdm
    # Upstream name -> picklable callable that returns a local copy of that artifact on
    # whichever node calls it (training workers may run on other nodes than the stage).
    input_fetchers: dict[str, Callable[[], Path]] = field(default_factory=dict)
    # Records rows with a ``step`` (a training curve) while the stage runs, from any
    # process; None when nothing is tracking (stages called directly).
    metrics_sink: MetricsSink | None = None
    # What only this stage uses (its package's RESOURCES); None: the type's defaults.
    resources: ResourcesT | None = None

    def parallel_map(self, fn: Callable, items: list, gpus: float = 0) -> list:
        """``[fn(item) for item in items]``, one task per item, each with ``gpus`` GPUs."""
        futures = [self.tasks.submit(fn, item, gpus=gpus) for item in items]
        return [self.tasks.result(future) for future in futures]

    def task_window(self) -> int:
        """How many tasks a stage keeps in flight: two per CPU of the cluster, so none
        waits for work, and at most ``MAX_TASKS_IN_FLIGHT``, so the results waiting in
        the object store stay bounded on a big cluster too."""
        return min(2 * self.tasks.parallelism(), MAX_TASKS_IN_FLIGHT)

    def fetcher(self, name: str, local: Path) -> Callable[[], Path]:
        """What a task on another process or node calls to get input ``name``; when the
        stage runs without the runner (tests), the path it was given."""
        return self.input_fetchers.get(name) or LocalPath(local)


class LocalPath:
    """A picklable fetcher for an input path every process can already read."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self) -> Path:
        return self.path


class InlineTasks:
    """Runs each "task" at once, in this process: a stage called without the runner."""

    def submit(self, fn: Callable, *args, num_returns: int = 1, gpus: float = 0) -> Any:
        """``fn(*args)``; with ``num_returns`` > 1, ``fn`` returns that many values."""
        return fn(*args)

    def result(self, future: Any) -> Any:
        return future

    def parallelism(self) -> int:
        return 1


class RayTasks:
    """One Ray task per call, with one CPU (and ``gpus`` GPUs), dealt out over the nodes.

    A stage's tasks are independent chunks of one job, so they should use every node's
    CPUs and disk at once. Ray's default policy fills the driver's node first, and even
    its SPREAD policy does not spread short tasks: the owner hands each next task of the
    same kind to a worker it already leased, so the first node to start a worker can
    drain the whole queue while the others are still starting theirs. Each task is
    therefore given a node in turn, round robin over the live nodes that have the
    resources it asks for: to the one it has sent fewest tasks so far, among those that
    have the resources free right now if any do.

    A CPU task waits for its node while that node lives (soft affinity without
    spilling): its node's earlier tasks are seconds long, and letting it spill to
    whichever node Ray's possibly stale view calls free put every task of a stage on one
    node now and then. A task whose node dies runs elsewhere. A GPU task does spill: a
    GPU held by a training run stays held for hours, and a decode shard should not wait
    for it while another node's GPU is idle.

    ``submit`` returns ObjectRefs; passing one to another ``submit`` hands the value
    over from node to node without passing through the caller. The caller's CPU is
    released while it waits in ``result``.
    """

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()  # node ID -> tasks given it so far

    def submit(self, fn: Callable, *args, num_returns: int = 1, gpus: float = 0) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = _nodes_with(cpus=1, gpus=gpus)
        free = [node for node in nodes if node in _nodes_free(cpus=1, gpus=gpus)]
        targets = free or nodes
        if targets:
            node = min(targets, key=lambda node: self.sent[node])  # the first of those sent fewest
            self.sent[node] += 1
            strategy = NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=gpus > 0)
        else:  # no node has them now (an autoscaler may add one): let Ray wait for it
            strategy = "SPREAD"
        return _remote(fn).options(num_cpus=1, num_gpus=gpus, num_returns=num_returns,
                                   scheduling_strategy=strategy).remote(*args)

    def result(self, future: Any) -> Any:
        import ray

        return ray.get(future)

    def parallelism(self) -> int:
        """CPUs in the cluster: how many tasks can run at once."""
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _nodes_with(cpus: float, gpus: float) -> list[str]:
    """The IDs of the live nodes that offer at least these resources, in a fixed order."""
    import ray

    return sorted(node["NodeID"] for node in ray.nodes()
                  if node["Alive"] and node["Resources"].get("CPU", 0) >= cpus
                  and node["Resources"].get("GPU", 0) >= gpus)


def _nodes_free(cpus: float, gpus: float) -> set[str]:
    """The IDs of the nodes with at least these resources unused now, as the GCS last
    heard; empty where Ray does not say (the call is not public API)."""
    try:
        from ray._private.state import available_resources_per_node

        return {node for node, free in available_resources_per_node().items()
                if free.get("CPU", 0) >= cpus and free.get("GPU", 0) >= gpus}
    except Exception:  # a Ray without it: plain round robin over the live nodes
        return set()


@functools.cache
def _remote(fn: Callable):
    """``fn`` as a Ray remote function, made once: each one made is exported to the
    cluster again, which a stage submitting hundreds of tasks would pay each time."""
    import ray

    return ray.remote(fn)


def in_order(tasks: InlineTasks | RayTasks, fn: Callable, items: Iterable, window: int) -> Iterator:
    """``fn(item)`` for each item as tasks, at most ``window`` in flight, results in order.

    A finished result waits in the object store until the caller takes it, so the
    window bounds both the work queued and the results held."""
    pending: deque = deque()
    for item in items:
        if len(pending) == window:
            yield tasks.result(pending.popleft())
        pending.append(tasks.submit(fn, item))
    while pending:
        yield tasks.result(pending.popleft())


def node_id() -> str:
    """The Ray node this process runs on, or ``local`` outside Ray: stages report how
    many nodes their tasks used."""
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return "local"


def ray_progress(*args, **kwargs):
    """A tqdm-compatible bar that Ray draws on the driver's terminal, or, where the
    driver's output is not a terminal, a line every few seconds (``progress_lines.py``)."""
    if lines_wanted():
        return LineProgress(*args, **kwargs)
    from ray.experimental.tqdm_ray import tqdm as ray_tqdm

    return ray_tqdm(*args, **kwargs)
